"""Digest results: what each stage did and what the whole digest printed.

Kept apart from the engine so that code which only reads or builds results (the session
protocol on an empty digest, ``supervise status``) never imports anyio.
"""

from __future__ import annotations


from .. import _jsontext
from .._record import record

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from typing import Literal

    StageStatus = Literal["ok", "failed", "timed_out", "killed", "not_started", "deferred", "skipped"]
    """``ok`` exit 0; ``failed`` non-zero exit or could not start; ``timed_out`` killed at its own
    ``timeout``; ``killed`` killed at the overall budget or by a signal to the supervisor;
    ``not_started`` the budget ended before it could start; ``deferred`` launched detached, result
    delivered separately; ``skipped`` not part of this run (read-only, re-emit, ``--only``, or its
    ``when`` condition does not hold)."""

@record
class StageResult:
    """One stage's outcome.

    Attributes:
        name: the stage name.
        status: see :data:`StageStatus`.
        exit_code: the leader's exit status; negative = killed by that signal; None when it
            never ran.
        seconds: wall time from spawn to end, in seconds.
        bytes: raw bytes the stage printed (before caps).
        truncated: its output was cut by its ``max_output``, or by the digest's (the total
            cap cut it: the digest shows less than it printed).
        output: what the digest shows for it (after caps, U+FFFD for invalid UTF-8).
    """

    name: str
    status: StageStatus
    exit_code: int | None = None
    seconds: float = 0.0
    bytes: int = 0
    truncated: bool = False
    output: str = ""

    @property
    def completed(self) -> bool:
        """The stage ran to its own end (successfully or not)."""
        return self.status in ("ok", "failed", "deferred", "skipped")


@record
class DigestResult:
    """A digest's outcome.

    Attributes:
        stages: per-stage results in declared order.
        truncated: the budget or a signal ended the digest early (the banner was printed).
        budget: the overall budget in seconds.
        seconds: wall time of the whole digest.
        reason: why it was truncated (``"budget"`` or a signal name), else None.
        text: the whole digest as printed (notices, stages, banner).
        notices: the notices written after the stages, in order (output cut marker, deferred
            results, IN PROGRESS lines, the truncation banner), each ending in a newline.
        cut: the digest-wide ``max_output`` cut the output (the loud cut marker was printed);
            ``--format json`` then says ``truncated: true``, reason ``max_output`` when
            nothing else ended it early.
    """

    stages: tuple[StageResult, ...]
    truncated: bool
    budget: float
    seconds: float
    reason: str | None = None
    text: str = ""
    notices: tuple[str, ...] = ()
    cut: bool = False

    @property
    def complete(self) -> bool:
        """Every stage ran to its end and nothing was truncated."""
        return not self.truncated and all(s.completed for s in self.stages)

    def to_json(self) -> str:
        """The ``--format json`` document (see docs/engine.md)."""
        return _jsontext.dumps({
            "truncated": self.truncated or self.cut,
            "reason": self.reason or ("max_output" if self.cut else None),
            "budget": self.budget,
            "seconds": round(self.seconds, 3),
            "stages": [
                {"name": s.name, "status": s.status, "exit_code": s.exit_code,
                 "seconds": round(s.seconds, 3), "bytes": s.bytes, "truncated": s.truncated,
                 "output": s.output}
                for s in self.stages
            ],
        }, ensure_ascii=False)
