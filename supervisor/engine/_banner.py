"""The truncation banner: what did not finish, what never started, how to re-run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from ._results import StageResult

BANNER_PREFIX = "\u25cf STARTUP TRUNCATED".encode()
_BAR = "\u25cf" + "\u2501" * 71


def _fmt_seconds(value: float) -> str:
    """Seconds as a person writes them: ``120``, ``1.5``, ``12.3``, ``0.001`` (never ``0.0``)."""
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def truncation_banner(budget: float, results: Sequence[StageResult], reason: str | None,
                      rerun_hint: str | None, started: float, now: float,
                      abnormal: Mapping[str, str] | None = None) -> str:
    """The banner text printed when the budget or a signal ends a digest.

    It names the budget (seconds), each stage that did not finish with its run time and byte
    count, each stage that never started, and the exact command to re-run with a larger
    budget (twice the current one, at least 30 s more) when the budget ended it, or the plain
    re-run command after a signal. Everything printed above it stays valid. ``abnormal``
    names stages that ended abnormally on their own (stage name -> the signal's name, e.g.
    ``SIGKILL``, or the cap key, e.g. ``max_tasks``); ``reason`` is then ``"stage"``.
    """
    abnormal = abnormal or {}
    unfinished = [r for r in results if r.status == "killed"]
    never = [r for r in results if r.status == "not_started"]
    by_budget = reason in (None, "budget")
    took, limit = _fmt_seconds(max(now - started, 0.0)), _fmt_seconds(budget)
    if reason == "stage":
        why = f"(budget {limit}s) because a stage ended abnormally."
    elif by_budget:
        why = f"to end within its {limit}s budget; the time to kill stages is reserved inside it."
    else:
        why = f"(budget {limit}s) because the supervisor received {reason}."
    lines = [_BAR,
             f"\u25cf STARTUP TRUNCATED: the digest stopped after {took}s {why}",
             "\u25cf Everything above is complete up to where each stage stopped."]
    if unfinished:
        lines.append("\u25cf Did not finish (killed): " + ", ".join(
            f"'{r.name}' ({_how(abnormal.get(r.name))}ran {r.seconds:.1f}s, {r.bytes} bytes)"
            for r in unfinished))
    if never:
        lines.append("\u25cf Never started: " + ", ".join(f"'{r.name}'" for r in never))
    if unfinished or never:
        lines.append("\u25cf Treat what those stages would have shown as UNKNOWN, not as absent.")
    hint = rerun_hint or "supervise digest"
    if by_budget:
        bigger = _fmt_seconds(max(budget * 2, budget + 30))
        lines.append(f"\u25cf Re-run with a larger budget: {hint} --budget {bigger}")
    else:
        lines.append(f"\u25cf Re-run it: {hint}")
    lines.append(_BAR)
    return "\n".join(lines)


def _how(abnormal: str | None) -> str:
    if abnormal is None:
        return ""
    if abnormal.startswith("max_"):
        return f"over its {abnormal} cap, "
    return f"died of {abnormal}, "
