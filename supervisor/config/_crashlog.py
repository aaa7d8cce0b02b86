"""An internal error's traceback, kept for the user to send: written to a log file and named in
the one line the error prints, as pre-commit's ``error_handler`` does.

Where: ``crash.log`` in the project's state dir when it exists (``SUPERVISE_STATE_DIR`` or
``<project>/.supervise``: never created for this), else in the user's cache dir
(:func:`supervisor._home.cache_dir`), else, with no home at all, the whole report goes to
stderr. The log is appended to and rotated past :data:`MAX_BYTES` (one old copy kept), through
the state dir's door (:class:`supervisor.state._statedir.StateDir`: no link followed).

Only an internal error (a bug) comes here; an expected failure is one line and nothing else.
"""

from __future__ import annotations

import os
import sys
import time

LOG_NAME = "crash.log"
MAX_BYTES = 256 * 1024
"""Bytes the crash log holds before it is rotated (``crash.log.1``)."""


def report(verb: str, err: BaseException) -> str:
    """The text written for ``err``: time (UTC), the version, the interpreter, the platform,
    the verb and its arguments, then the traceback."""
    import platform
    import traceback

    from .._version import VERSION

    head = [f"### {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC: supervise {verb}",
            f"watchkeeper {VERSION}", f"python {sys.version.split()[0]} ({sys.executable})",
            f"platform {platform.platform()}", f"argv {sys.argv[1:]!r}", ""]
    body = "".join(traceback.format_exception(err))
    return "\n".join(head) + body + "\n"


def _append(folder: str, data: bytes, *, create: bool) -> str:
    from ..state._statedir import StateDir

    with StateDir.open(folder, create=create) as place:
        place.append(LOG_NAME, data, max_bytes=MAX_BYTES, keep=1)
    return os.path.join(folder, LOG_NAME)


def write_crash_log(verb: str, err: BaseException, project: str | None = None) -> str:
    """Write :func:`report` of ``err`` to the crash log (the module docstring says where) and
    return its path; ``""`` when no file could be written, the report then written to stderr.
    ``project``: the project folder (default: the one holding the current directory). Never
    raises."""
    try:
        data = report(verb, err).encode("utf-8", "backslashreplace")
    except BaseException:  # noqa: BLE001 - even the report failed: say what we can
        data = f"supervise {verb}: {type(err).__name__}: {err}\n".encode("utf-8", "replace")
    try:
        from ..state._project import find_project_root
        from ._context import state_dir_for

        state = state_dir_for(find_project_root(project or os.getcwd()))
        if os.path.isdir(state) and not os.path.islink(state):
            return _append(state, data, create=False)
    except Exception:  # noqa: BLE001 - an unusable state dir: the cache dir
        pass
    try:
        from .._home import cache_dir

        cache = cache_dir()
        if cache is not None:
            return _append(cache, data, create=True)
    except Exception:  # noqa: BLE001 - no cache dir either: stderr
        pass
    try:
        sys.stderr.write(data.decode("utf-8", "replace"))
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    return ""


def crash_line(verb: str, err: BaseException, project: str | None = None) -> str:
    """The one line for an internal error, with the crash log written and named:
    ``internal error: ValueError: boom (traceback and version: /p/.supervise/crash.log)``."""
    path = write_crash_log(verb, err, project)
    where = (f"traceback and version: {path}" if path
             else "traceback and version above, no folder to keep them")
    return f"internal error: {type(err).__name__}: {err} ({where})"
