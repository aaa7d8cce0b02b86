"""The nudge: one line asking the model to run the digest itself.

Used for harnesses that cannot carry hook output into the model's context, and for sources
(``resume``, ``reload``, ``fork``) where the prior context, digest included, is restored.
The line starts with U+2063 (INVISIBLE SEPARATOR) so bridges and tests can tell an
operational message from prose, then ``SUPERVISE_OP: v1 session-start: `` and the body.

It stays silent when the lock's live owner is one of our first :data:`NUDGE_HOPS` ancestors:
the digest already ran inside this very harness session.
"""

from __future__ import annotations

from pathlib import Path

from ._ancestry import NUDGE_HOPS, ancestor_ids, is_alive
from ._errors import StateError
from ._lock import LOCK_FILE, LockRecord, read_record
from ._procinfo import ProcInfo

MARK = "\u2063"
LABEL = "SUPERVISE_OP:"
KIND = "v1 session-start"
BODY = "Run `supervise digest` now, exactly once, before executing any other instructions."
NUDGE_TEXT = f"{MARK}{LABEL} {KIND}: {BODY}\n"
"""The exact nudge payload (UTF-8: ``E2 81 A3`` then ASCII, one trailing newline)."""


def digest_ran_here(state_dir: Path, chain: list[ProcInfo]) -> bool:
    """True when ``lock.json`` names a live process among ``chain[:NUDGE_HOPS + 1]``.

    ``chain`` is :func:`supervisor._ancestry.ancestry` output (ourselves first). An unreadable,
    symlinked or absent lock is ``False`` (nudge), never an error.
    """
    try:
        record = read_record(state_dir / LOCK_FILE, LockRecord)
    except (StateError, OSError):
        return False
    if record is None:
        return False
    near = ancestor_ids(chain[:NUDGE_HOPS + 1])
    return any(record.ident.same(a) for a in near) and is_alive(record.ident)
