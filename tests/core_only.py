"""Run edgewise as a core-only install would, inside the dev environment.

The dev environment installs every extra, so a core command that imports an extra's package (the daemon imported
`cryptography`, which only the dev extra pulled in) passes every test and fails for a new user. `core_only_env()`
gives an environment in which a `sitecustomize` refuses to import any package installed here that is not in the
core install's dependency closure (pyproject's `dependencies`, followed through each package's own requirements).
Child processes (the daemon's workers, `edgewise replay`) inherit it.
"""

from __future__ import annotations

import os
import re
import sys
from functools import cache
from importlib.metadata import PackageNotFoundError, distribution, packages_distributions
from pathlib import Path

from packaging.requirements import Requirement

SITECUSTOMIZE = '''\
import os, sys
from importlib.abc import MetaPathFinder

_BLOCKED = frozenset(os.environ.get("EDGEWISE_TEST_BLOCKED_MODULES", "").split(","))


class _CoreOnly(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (not in the core install)", name=name)
        return None


sys.meta_path.insert(0, _CoreOnly())
'''


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@cache
def core_distributions() -> frozenset[str]:
    """The distributions a plain `pip install edgewise` installs: edgewise's requirements without extras (those
    whose markers hold with no extra asked for), and theirs, and so on."""
    seen: set[str] = set()
    todo = ["edgewise"]
    while todo:
        name = _canonical(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = distribution(name).requires or []
        except PackageNotFoundError:
            continue
        for text in requires:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
                for extra in requirement.extras:  # uvicorn[standard]: its extra's requirements are core too
                    todo.extend(_extra_requirements(requirement.name, extra))
    return frozenset(seen)


def _extra_requirements(name: str, extra: str) -> list[str]:
    try:
        requires = distribution(name).requires or []
    except PackageNotFoundError:
        return []
    found = []
    for text in requires:
        requirement = Requirement(text)
        if requirement.marker is not None and requirement.marker.evaluate({"extra": extra}) \
                and not requirement.marker.evaluate({"extra": ""}):
            found.append(requirement.name)
    return found


@cache
def blocked_modules() -> frozenset[str]:
    """Top-level modules that only packages outside the core install provide."""
    core = core_distributions()
    return frozenset(module for module, dists in packages_distributions().items()
                     if module not in sys.stdlib_module_names and not module.startswith("_")
                     and not any(_canonical(d) in core for d in dists))


def core_only_env(tmp_path: Path) -> dict[str, str]:
    """os.environ with the core-only import guard for every Python process started with it."""
    folder = tmp_path / "core-only-site"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), env.get("PYTHONPATH", "")) if p)
    env["EDGEWISE_TEST_BLOCKED_MODULES"] = ",".join(sorted(blocked_modules()))
    return env
