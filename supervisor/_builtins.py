"""Built-in stage programs: the ``stages/`` folder, shipped inside the wheel as ``_stages``.

Adding a built-in stage is a one-file change: drop ``stages/<name>.py`` (stdlib plus the
project's runtime dependencies, reading ``SUPERVISE_*`` from its environment) and name it in a
config as ``builtin = "<name>"``.
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

from ._errors import ConfigError


@cache
def stages_dir() -> Path:
    """The folder holding the built-in stage programs.

    An installed wheel carries them as ``supervisor/_stages``; a source checkout (editable
    install, tests) has them beside the package as ``stages/``.
    """
    here = Path(__file__).resolve().parent
    for candidate in (here / "_stages", here.parent / "stages"):
        if candidate.is_dir():
            return candidate
    raise ConfigError(f"built-in stages not found next to {here} (broken install?)")


def list_builtins() -> list[str]:
    """Names of the built-in stages, sorted (files ``stages/<name>.py`` not starting with _)."""
    return sorted(p.stem for p in stages_dir().glob("*.py") if not p.name.startswith("_"))


def builtin_argv(name: str, args: tuple[str, ...] = ()) -> list[str]:
    """The argv that runs built-in stage ``name`` with this interpreter.

    Raises:
        ConfigError: no such built-in; the message lists the ones that exist.
    """
    program = stages_dir() / f"{name}.py"
    if not program.is_file():
        known = ", ".join(list_builtins()) or "none"
        raise ConfigError(f"unknown builtin stage '{name}' (known: {known})")
    return [sys.executable, str(program), *args]
