"""Built-in stage programs: the ``stages/`` folder, shipped inside the wheel as ``_stages``.

A built-in is either one file, ``stages/<name>.py``, or a small package, ``stages/<name>/``
whose ``__main__.py`` is the program and whose other modules are its helpers. Either runs as
``[python, <program file>]``: the program's own folder is first on ``sys.path``. Adding a
built-in stage is a one-file change: drop ``stages/<name>.py`` (stdlib plus the project's
runtime dependencies, reading ``SUPERVISE_*`` from its environment) and name it in a config as
``builtin = "<name>"``. Files and folders whose name starts with ``_`` are shared helpers.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from functools import cache
from pathlib import Path

from .._errors import ConfigError

TYPE_CHECKING = False  # not typing's: the hook's hot path imports this module
if TYPE_CHECKING:
    from typing import Any


@cache
def stages_dir() -> Path:
    """The folder holding the built-in stage programs.

    An installed wheel carries them as ``supervisor/_stages``; a source checkout (editable
    install, tests) has them beside the package as ``stages/``.
    """
    # the package's folder, wherever in it this module sits
    here = Path(str(sys.modules[__name__.partition(".")[0]].__file__)).resolve().parent
    for candidate in (here / "_stages", here.parent / "stages"):
        if candidate.is_dir():
            return candidate
    raise ConfigError(f"built-in stages not found next to {here} (broken install?)")


def _program(name: str) -> Path | None:
    """The program file of built-in ``name``, or None when there is no such built-in."""
    if not name or name.startswith(("_", ".")) or "/" in name or "\0" in name:
        return None
    for program in (stages_dir() / f"{name}.py", stages_dir() / name / "__main__.py"):
        if program.is_file():
            return program
    return None


def list_builtins() -> list[str]:
    """Names of the built-in stages, sorted: files ``stages/<name>.py`` and packages
    ``stages/<name>/__main__.py``, names not starting with ``_``."""
    names = {p.stem for p in stages_dir().glob("*.py")}
    names |= {p.parent.name for p in stages_dir().glob("*/__main__.py")}
    return sorted(n for n in names if not n.startswith("_"))


def builtin_program(name: str) -> Path:
    """The program file of built-in stage ``name`` (a ``.py`` file or a package's
    ``__main__.py``).

    Raises:
        ConfigError: no such built-in; the message lists the ones that exist.
    """
    program = _program(name)
    if program is None:
        known = ", ".join(list_builtins()) or "none"
        raise ConfigError(f"unknown builtin stage '{name}' (known: {known})")
    return program


def builtin_argv(name: str, args: tuple[str, ...] = ()) -> list[str]:
    """The argv that runs built-in stage ``name`` with this interpreter, isolated (``-I``:
    the harness's ``PYTHONPATH``, ``PYTHONHOME``, ``PYTHONSTARTUP`` and user site-packages
    cannot shadow the ``supervisor`` package the stage imports; a supervisord on
    ``PYTHONPATH`` did) and unbuffered (``-u``: isolated mode ignores ``PYTHONUNBUFFERED``).

    Raises:
        ConfigError: no such built-in; the message lists the ones that exist.
    """
    return [sys.executable, "-I", "-u", str(builtin_program(name)), *args]


def idle(name: str, env: Mapping[str, str]) -> bool:
    """True when built-in stage ``name`` started with environment ``env`` would print nothing,
    do nothing and exit 0 (no memory store, no summary file, default options): the engine
    then records it as ``ok`` without starting an interpreter for it. The rule is the one the
    stage program checks first (``stages/_idle.py``, loaded from :func:`stages_dir` once);
    False when that file cannot be loaded (the stage then runs and decides itself)."""
    rule = _idle_rule()
    return rule is not None and may_idle(name) and bool(rule.idle(name, env))


def may_idle(name: str) -> bool:
    """True when built-in ``name`` has a "nothing to do" rule at all (``memory``,
    ``summary``): the others are started without building an environment to ask it."""
    rule = _idle_rule()
    return rule is not None and name in rule.IDLE_WHEN_ABSENT


@cache
def _idle_rule() -> Any:
    """``stages/_idle.py`` as a module (``idle``, ``IDLE_WHEN_ABSENT``), or None when it
    cannot be loaded."""
    import importlib.util

    try:
        path = stages_dir() / "_idle.py"
        spec = importlib.util.spec_from_file_location("supervisor._stage_idle", path)
        if spec is None or spec.loader is None:
            return None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if not callable(getattr(module, "idle", None)) or not isinstance(
                getattr(module, "IDLE_WHEN_ABSENT", None), dict):
            return None
        return module
    except (ConfigError, OSError, ImportError, SyntaxError):
        return None
