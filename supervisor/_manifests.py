"""The harness manifests whose required fields repeat a fact of ours, generated, never committed.

Gemini CLI refuses an extension whose ``gemini-extension.json`` has no ``version`` (0.61.0:
'Invalid configuration ...: missing "version"'), so that file is written from the one home
of the version (:data:`supervisor._version.VERSION`; ``pyproject.toml`` reads it too) and the
extension's name (the harness table's Gemini ``plugin``): by the wheel build
(``scripts/hatch_build.py``, into the source tree the wheel copies) and by ``supervise install
gemini --plugin`` before it links the folder (a checkout). It is git-ignored. The manifests
whose version is optional carry none: Claude Code's ``plugin.json``, the Pi and OpenCode
``package.json`` files (both load a local package without one: 0.73.1, 1.18.33).

Stdlib only, no relative import beyond the base room: the build hook imports it from the
source tree before any dependency is installed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ._harnesses import BY_NAME
from ._version import VERSION

GEMINI_EXTENSION = "gemini-extension.json"
"""The Gemini CLI extension's manifest, in ``plugins/gemini/``."""

GEMINI_DESCRIPTION = ("Session-start context (the watchkeeper digest) from the installed "
                      "supervise-hook command.")


def gemini_extension() -> str:
    """The text of ``plugins/gemini/gemini-extension.json``: name, version, description."""
    return json.dumps({"name": BY_NAME["gemini"].plugin, "version": VERSION,
                       "description": GEMINI_DESCRIPTION}, indent=2) + "\n"


def write_gemini_extension(folder: Path) -> bool:
    """Write :func:`gemini_extension` into ``folder`` (``plugins/gemini``) unless it holds that
    text already; True when written. A link in its place is replaced, never written through.

    Raises:
        OSError: the folder cannot be written (an installed package owned by another user).
    """
    import stat

    path = folder / GEMINI_EXTENSION
    text = gemini_extension()
    try:
        if stat.S_ISREG(os.lstat(path).st_mode) and path.read_text("utf-8") == text:
            return False  # a regular file (never a FIFO or a link) holding that text already
    except (OSError, UnicodeDecodeError):
        pass
    temp = folder / f".{GEMINI_EXTENSION}.{os.getpid()}.tmp"
    temp.write_text(text, "utf-8")
    os.replace(temp, path)
    return True
