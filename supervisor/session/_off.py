"""The off switch: turn watchkeeper off for a session or a project without uninstalling.

Two ways, checked in this order (docs/session-protocol.md, "Turning it off"):

* ``SUPERVISE_OFF`` in the environment (a session, a shell, a CI job): ``1`` (or any value
  other than the "on" words below) turns it off; ``0``, ``false``, ``no``, ``off`` or an
  empty value leave it on, and an explicit "on" word also overrides the file, so one session
  can be turned back on inside a project that is off.
* a file ``.supervise/off`` at the project root (the project), or ``off`` in the state dir
  when ``SUPERVISE_STATE_DIR`` moves it. Its first line, if any, is shown as the reason.

Every hook and verb asks :func:`off_reason`; where it applies, the output states it once with
:func:`off_line` ("watchkeeper is off: ..."). Reads files only (the hook's hot path): no
import beyond the standard library and :mod:`supervisor.state._project` (whose capped,
non-blocking reader it uses), and the file is never opened unless it is a regular file (a
FIFO there must not hang a hook).
"""

from __future__ import annotations

import os

from ..state._project import read_small

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from _typeshed import StrPath

OFF_ENV = "SUPERVISE_OFF"
"""The environment variable that turns watchkeeper off for one session or shell."""
OFF_FILE = "off"
"""The file in ``.supervise/`` (or the state dir) that turns it off for a project."""
ON_WORDS = frozenset({"", "0", "false", "no", "off"})
"""``SUPERVISE_OFF`` values that mean "on" (compared stripped and lower-cased)."""
_NOTE_BYTES = 200
"""Bytes of the file's first line shown as the reason, at most."""


def _note(path: StrPath) -> str:
    """The first line of the regular file ``path``, printable characters only, bounded."""
    text = read_small(path, _NOTE_BYTES)
    line = text.splitlines()[0] if text.strip() else ""
    return "".join(c for c in line if c.isprintable()).strip()


def off_reason(project_dir: StrPath, env: dict[str, str] | None = None) -> str:
    """Why watchkeeper is off for ``project_dir`` (one clause), or ``""`` when it is on.

    ``env`` defaults to ``os.environ``. Never raises: an unreadable file still counts as
    present (it exists, so the user meant it), a missing one as absent.
    """
    env = dict(os.environ) if env is None else env
    value = env.get(OFF_ENV)
    if value is not None:
        if value.strip().lower() in ON_WORDS:
            return ""  # an explicit "on" for this session wins over the project's file
        shown = "".join(c for c in value[:40] if c.isprintable())
        return f"{OFF_ENV}={shown} is set (unset it or set {OFF_ENV}=0 to turn it on)"
    from ..config._context import state_dir_for
    from ..state._project import STATE_DIR_NAME

    places = [os.path.join(project_dir, STATE_DIR_NAME, OFF_FILE)]
    state = os.path.join(state_dir_for(project_dir), OFF_FILE)
    if os.path.normpath(state) != os.path.normpath(places[0]):
        places.append(state)
    for path in places:
        try:
            os.lstat(path)
        except OSError:
            continue
        note = _note(path)
        shown = f"{STATE_DIR_NAME}/{OFF_FILE}" if path == places[0] else str(path)
        return (f"{shown} exists in {project_dir}" + (f" ({note})" if note else "")
                + f" (remove it, or set {OFF_ENV}=0, to turn it on)")
    return ""


def off_line(reason: str, consequence: str = "the session-start digest did not run") -> str:
    """The one line stated where the switch applies:
    ``watchkeeper is off: REASON; CONSEQUENCE.\\n``."""
    return f"watchkeeper is off: {reason}; {consequence}.\n"
