"""edgewise: one declarative event pipeline, run anywhere (command, edge daemon, Spark).

The public API is what ``__all__`` names; everything else may change.
"""

from __future__ import annotations

__version__ = "0.1.0"

import typing as _typing

from edgewise.errors import (
    ConfigError,
    EdgewiseError,
    EvalError,
    InputMissing,
    PluginError,
    SinkError,
    SourceError,
    StepError,
)
from edgewise.events import Batch, Event

if _typing.TYPE_CHECKING:
    from edgewise.config import load
    from edgewise.config.plan import Plan
    from edgewise.expr.compiler import Expression, compile_expression

_LAZY = {"load": "edgewise.config", "Plan": "edgewise.config.plan", "Expression": "edgewise.expr.compiler",
         "compile_expression": "edgewise.expr.compiler"}
"""Names whose modules load on first use: the config models and the expression compiler take half a second to
import, which every ``import edgewise.…`` would pay (a Spark Python worker importing one small module, say)."""


def __getattr__(name: str) -> _typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'edgewise' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

__all__ = [
    "Batch",
    "ConfigError",
    "EdgewiseError",
    "EvalError",
    "Event",
    "Expression",
    "InputMissing",
    "Plan",
    "PluginError",
    "SinkError",
    "SourceError",
    "StepError",
    "__version__",
    "compile_expression",
    "load",
]
