"""Find a workload by name: a built-in, ``path/to/file.py:NAME`` or ``package.module:NAME``.

>>> load_workload("lr2s").name
'LR2S'
>>> load_workload("no_such_file.py:LANES")
Traceback (most recent call last):
...
lmstream_kit.exceptions.ConfigError: workload file no_such_file.py does not exist
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from ..exceptions import ConfigError, one_line
from .base import WORKLOADS, Workload

__all__ = ["find_workloads", "load_workload", "workloads_in"]


def load_workload(spec: Any) -> Workload:
    """The workload ``spec`` names: a Workload, a registered name, ``FILE.py[:NAME]`` or ``MODULE:NAME``.

    A file or module without ``:NAME`` must define exactly one workload.  Errors
    are one-line ConfigErrors that name the spec (an unknown name lists the known ones).
    """
    if isinstance(spec, Workload):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"workload must be a name, FILE.py:NAME or MODULE:NAME, got {spec!r}")
    spec = spec.strip()
    if spec in WORKLOADS or not _is_reference(spec):
        return WORKLOADS.get(spec)
    target, _, attr = spec.rpartition(":") if ":" in spec else (spec, "", "")
    found = workloads_in(target)
    if attr:
        if attr in found:
            return found[attr]
        by_name = [w for w in found.values() if w.name == attr]
        if by_name:
            return by_name[0]
        known = ", ".join(sorted(found)) or "(none)"
        raise ConfigError(f"{target} has no workload {attr!r}; workloads in it: {known}")
    if len(found) != 1:
        known = ", ".join(sorted(found)) or "none"
        raise ConfigError(f"{target} defines {len(found)} workloads ({known}); name one as {target}:NAME")
    return next(iter(found.values()))


def find_workloads(spec: str) -> list[Workload]:
    """Every workload ``spec`` names: all those a file or module defines when it has no ``:NAME``."""
    if _is_reference(spec) and ":" not in spec:
        return list(workloads_in(spec).values())
    return [load_workload(spec)]


def workloads_in(target: str) -> dict[str, Workload]:
    """The workloads a file or module defines at top level, by attribute name."""
    module = _import(target)
    return {name: obj for name, obj in vars(module).items() if isinstance(obj, Workload) and not name.startswith("_")}


def _is_reference(spec: str) -> bool:
    return ":" in spec or spec.endswith(".py")


def _import(target: str) -> ModuleType:
    if target.endswith(".py") or "/" in target:
        path = Path(target).expanduser()
        if not path.is_file():
            raise ConfigError(f"workload file {target} does not exist")
        path = path.resolve()
        # one module per file version: loading it again (a bench repeat) reuses it, an edit reloads it
        key = f"{path}:{path.stat().st_mtime_ns}"
        mod_name = "lmstream_user_" + hashlib.sha1(key.encode()).hexdigest()[:12]
        if mod_name in sys.modules:
            return sys.modules[mod_name]
        loader_spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[mod_name] = module
        try:
            loader_spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[mod_name]
            raise ConfigError(f"cannot load workload file {target}: {type(exc).__name__}: {one_line(exc)}") from None
        return module
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name and target.startswith(exc.name):
            raise ConfigError(f"no module named {target!r} (for a file, give its path ending in .py)") from None
        raise ConfigError(f"cannot import {target}: {type(exc).__name__}: {one_line(exc)}") from None
    except Exception as exc:
        raise ConfigError(f"cannot import {target}: {type(exc).__name__}: {one_line(exc)}") from None
