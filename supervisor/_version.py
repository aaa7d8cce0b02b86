"""The package version, as a constant read once from its one home: ``gemini-extension.json``.

Gemini CLI refuses an extension whose manifest has no ``version`` (0.61.0: 'Invalid
configuration ...: missing "version"'), and installs one straight from a git repository only
when that manifest is at the repository's root (``gemini extensions install <repo URL>``;
DOC google-gemini/gemini-cli ``docs/extensions/releasing.md``). So the committed root manifest
holds the version: ``pyproject.toml`` reads it at build time (``[tool.hatch.version]``, a
pattern) and this module at run time, from the wheel's copy
(``supervisor/_plugins/gemini-extension.json``) or the checkout's root. ``supervise
--version`` imports nothing else but :mod:`supervisor._jsontext` (``importlib.metadata`` alone
costs more than the interpreter's start).
"""

import os

MANIFEST = "gemini-extension.json"
"""The file holding the version (the Gemini CLI extension's manifest)."""

UNKNOWN = "0+unknown"
"""The version of a package whose manifest is missing or unreadable (never raised)."""


def manifest_paths() -> tuple[str, str]:
    """Where the manifest is: the wheel's copy beside this package, then the checkout's root."""
    here = os.path.dirname(os.path.abspath(__file__))
    return (os.path.join(here, "_plugins", MANIFEST), os.path.join(os.path.dirname(here), MANIFEST))


def read_version() -> str:
    """The ``version`` string of the first manifest of :func:`manifest_paths` that has one
    (read whole, at most 64 KiB), else :data:`UNKNOWN`. Never raises."""
    for path in manifest_paths():
        try:
            with open(path, "rb") as manifest:
                raw = manifest.read(65536)
            from ._jsontext import loads

            value = loads(raw).get("version")
        except (OSError, ValueError, AttributeError, RecursionError):
            continue
        if isinstance(value, str) and value:
            return value
    return UNKNOWN


VERSION = read_version()
"""The package version, as the manifest states it."""
