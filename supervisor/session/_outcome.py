"""What a session start produces: the text the hook prints and how it came about.

Kept apart from :mod:`supervisor.session._routing` (which routes a start and builds the outcome) so
that the start records of :mod:`supervisor.session._starts`, which store and replay outcomes, need not
import the router back.
"""

from __future__ import annotations

from .._record import record


@record
class SessionOutcome:
    """What the hook prints (``text``, rendered per harness by the adapters) and how."""

    text: str
    kind: str  # "digest", "reemit" or "nudge"
    mode: str = "full"
    truncation: str | None = None
    """Why the digest was cut short: ``"budget"``, a signal name (``"SIGTERM"``), or None."""
    parts: tuple[tuple[str, str], ...] | None = None
    """``(stage name, stage output)`` in declared order, for an adapter that must cut the text
    at stage boundaries (inline caps); None when the text is not made of stage blocks."""
    notices: str = ""
    """The notices of ``text`` (READ-ONLY first, then trailing notices and banners)."""
