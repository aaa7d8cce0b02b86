"""The nudge: one line asking the model to run the digest itself.

Used for harnesses that cannot carry hook output into the model's context, and for sources
(``resume``, ``reload``, ``fork``) where the prior context, digest included, is restored.
The line starts with U+2063 (INVISIBLE SEPARATOR) so bridges and tests can tell an
operational message from prose, then ``SUPERVISE_OP: v1 session-start: `` and the body.
Its one home is the packaged ``supervisor/nudge.txt``, read here at import and by the
extension bridges (``supervisor/bridges/core.mjs``: beside the package, or from the
``watchkeeper.json`` that ``supervise install pi|opencode`` writes from :data:`NUDGE_TEXT`).

It stays silent when the lock's live owner is one of our first :data:`NUDGE_HOPS` ancestors
(the digest already ran inside this very harness process), and when the session's transcript
already holds the digest or the nudge since its last compaction
(:func:`restored_in_transcript`).
"""

from __future__ import annotations

import os


from ._ancestry import NUDGE_HOPS, ancestor_ids, is_alive
from .._errors import StateError
from ._lock import LOCK_FILE, LockRecord, read_record
from ._procinfo import ProcInfo

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from _typeshed import StrPath

NUDGE_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "nudge.txt")
"""The packaged file that holds the nudge line (part of the package, never of a tree)."""


def _load() -> str:
    with open(NUDGE_FILE, encoding="utf-8") as f:
        return f.readline(4096).rstrip("\n") + "\n"


NUDGE_TEXT = _load()
"""The exact nudge payload (UTF-8: ``E2 81 A3`` then ASCII, one trailing newline)."""
MARK = NUDGE_TEXT[0]
"""U+2063, which marks an operational line."""
LABEL, _rest = NUDGE_TEXT[1:].split(" ", 1)
KIND, BODY = _rest.rstrip("\n").split(": ", 1)
"""``SUPERVISE_OP:``, ``v1 session-start`` and the sentence, as the file has them."""


def digest_ran_here(state_dir: StrPath, chain: list[ProcInfo]) -> bool:
    """True when ``lock.json`` names a live process among ``chain[:NUDGE_HOPS + 1]``.

    ``chain`` is :func:`supervisor.session._ancestry.ancestry` output (ourselves first). An unreadable,
    symlinked or absent lock is ``False`` (nudge), never an error.
    """
    try:
        record = read_record(os.path.join(state_dir, LOCK_FILE), LockRecord)
    except (StateError, OSError):
        return False
    if record is None:
        return False
    near = ancestor_ids(chain[:NUDGE_HOPS + 1])
    return any(record.ident.same(a) for a in near) and is_alive(record.ident)


def restored_in_transcript(state_dir: StrPath, harness: str, transcript: str | None) -> bool:
    """True when a resume needs nothing from us: the harness's transcript (Claude, Codex;
    :func:`supervisor.session._transcript.session_contexts`), since its last compaction, already
    holds a session-start text this project's hook delivered (its fingerprint is in the
    ledger, :mod:`supervisor.session._ledger`) or the nudge itself (nudges never accumulate), or the
    compaction is the transcript's last entry (Codex then fires SessionStart(compact) in the
    same process, whose re-emit follows). Unknown (no or unreadable transcript, another
    harness) is False: the nudge is sent, as before. Never raises."""
    from ._transcript import session_contexts

    view = session_contexts(transcript, harness)
    if view is None:
        return False
    if view.compacted and view.compaction_last:
        return True
    if any(f"{LABEL} {KIND}: " in text for text in view.contexts):  # any nudge, any wording
        return True
    from ._ledger import delivered, fingerprint

    marks = delivered(state_dir)
    return any(fingerprint(text) in marks for text in view.contexts)
