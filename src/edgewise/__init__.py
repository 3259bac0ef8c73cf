"""edgewise: one declarative event pipeline, run anywhere (command, edge daemon, Spark).

The public API is what ``__all__`` names; everything else may change.
"""

from __future__ import annotations

__version__ = "0.1.0"

from edgewise.config import load
from edgewise.config.plan import Plan
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
from edgewise.expr.compiler import Expression, compile_expression

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
