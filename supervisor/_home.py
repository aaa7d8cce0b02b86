"""The user's home folder and XDG base folders, or None when there is no home.

``os.path.expanduser("~")`` returns ``"~"`` itself when ``HOME`` is unset and the user id has
no passwd entry (a container started with ``--user 12345``), and ``"/"`` for ``HOME=""``:
joined onto, either made a *relative* ``~/.cache/...`` that landed in the working directory
(a project a clone controls). Every place that derives a home goes through here.
"""

from __future__ import annotations

import os

__all__ = ["cache_dir", "home_dir", "xdg_dir"]


def home_dir() -> str | None:
    """The home folder as an absolute path; None when ``HOME`` is set to the empty string or
    no absolute home is known (``HOME`` unset or relative and no passwd entry). Never raises;
    the folder's existence is not checked."""
    if os.environ.get("HOME") == "":
        return None
    try:
        home = os.path.expanduser("~")
    except (KeyError, OSError, ValueError):  # pragma: no cover - expanduser is total today
        return None
    return home if os.path.isabs(home) else None


def xdg_dir(variable: str, *fallback: str) -> str | None:
    """An XDG base folder: ``$variable`` when it is an absolute path (the XDG Base Directory
    specification says a relative one is to be ignored), else ``home_dir()/fallback...``;
    None when neither is known. E.g. ``xdg_dir("XDG_CACHE_HOME", ".cache")``."""
    value = os.environ.get(variable, "")
    if os.path.isabs(value):
        return value
    home = home_dir()
    return os.path.join(home, *fallback) if home is not None else None


def cache_dir() -> str | None:
    """watchkeeper's folder in the user's cache dir (``$XDG_CACHE_HOME/watchkeeper`` or
    ``~/.cache/watchkeeper``: the plan cache, the crash log when there is no state dir); None
    when there is no home. Not created here."""
    base = xdg_dir("XDG_CACHE_HOME", ".cache")
    return os.path.join(base, "watchkeeper") if base is not None else None
