"""Harness adapters: each harness's hook contract and the exact bytes our hook prints for it.

Public door:

- :data:`ADAPTERS`: ``{name: Adapter}`` for the hook-command harnesses (the rows of kind
  ``hook`` and ``nudge`` of the harness table, :mod:`supervisor._harnesses`).
- :func:`render`: the exact stdout bytes for a harness (envelope, inline cap).
- :func:`fit_inline`: cut a digest to an inline cap from the engine's per-stage results.
- :func:`inline_cap`: a harness's cap, with the config's ``inline_cap`` table applied.

This module is on the hook's hot path: it imports one adapter's data when that harness is
looked up (:data:`ADAPTERS` is a lazy registry); JSON and the file-writing code load when used.

May import: the base modules and ``supervisor.state`` (settings files are written
atomically; long digests are saved through the state door). Never config, the engine,
the session protocol, the bridges or the verbs: the harness facts stand on their own.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from importlib import import_module

from .._harnesses import HOOKS
from ._base import HOOK_MARKER, SHIM_MARKER, Adapter

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from _typeshed import StrPath

__all__ = ("ADAPTERS", "Adapter", "HOOK_MARKER", "SHIM_MARKER", "fit_inline", "get",
           "inline_cap", "is_foreign", "render")

NAMES = HOOKS
"""The hook-command harnesses, in the harness table's order (:data:`supervisor._harnesses.HOOKS`);
``supervisor/adapters/<name>.py`` holds each one's :class:`Adapter` as ``ADAPTER``."""


class _Registry(Mapping[str, Adapter]):
    """``{name: Adapter}`` over :data:`NAMES`, each adapter's module imported when it is first
    looked up: a hook needs its own harness's facts only, and the modules together would add
    to every hook's imports (docs/benchmarks.md, row "SessionStart hook on an empty digest"). Iterating
    or ``values()`` loads them all."""

    __slots__ = ("_loaded",)

    def __init__(self) -> None:
        self._loaded: dict[str, Adapter] = {}

    def __getitem__(self, name: str) -> Adapter:
        adapter = self._loaded.get(name)
        if adapter is None:
            if name not in NAMES:
                raise KeyError(name)
            adapter = self._loaded[name] = import_module(f"{__name__}.{name}").ADAPTER
        return adapter

    def __contains__(self, name: object) -> bool:
        return name in NAMES

    def __iter__(self) -> Iterator[str]:
        return iter(NAMES)

    def __len__(self) -> int:
        return len(NAMES)

    def __repr__(self) -> str:
        return f"ADAPTERS({', '.join(NAMES)})"


ADAPTERS: Mapping[str, Adapter] = _Registry()
"""Registry of hook-command harnesses, by the name used in ``supervise hook NAME`` (a read-only
mapping; each adapter module is imported on first use)."""

DEFAULT_CAP = 16_000
"""Inline cap in characters for a harness we have no adapter for (printed as plain text)."""

KINDS = ("digest", "reemit", "nudge", "prompt", "post-tool", "summary")
"""What is being printed: a digest or re-emit (session start; inline cap applies), the nudge
line, a deferred result delivered by the per-prompt hook, post-tool context (Claude ``Read``),
the note a pre-compaction hook hands the summariser (plain text in every envelope: Claude
appends a PreCompact hook's stdout to the summarisation prompt as it is)."""


def get(harness: str) -> Adapter:
    """The adapter for ``harness``.

    Raises:
        KeyError: unknown harness; the message lists the known ones.
    """
    try:
        return ADAPTERS[harness]
    except KeyError:
        raise KeyError(f"unknown harness {harness!r} (known: {', '.join(ADAPTERS)})") from None


def resolve(harness: str | Adapter | None) -> Adapter | None:
    """``harness`` as its :class:`Adapter`: an adapter is returned as is (a caller that looked
    it up once, the hook), a name is looked up, an unknown name or None gives None."""
    if harness is None or isinstance(harness, Adapter):
        return harness
    return ADAPTERS.get(harness)


def inline_cap(harness: str | Adapter | None, overrides: Mapping[str, int] | None = None) -> int:
    """``harness``'s inline cap in characters (a name or a resolved adapter):
    ``overrides[name]`` (the config's ``inline_cap`` table) if given, else the adapter's
    default."""
    adapter = resolve(harness)
    name = adapter.name if adapter is not None else harness if isinstance(harness, str) else ""
    if overrides and name in overrides:
        return int(overrides[name])
    return adapter.inline_cap if adapter else DEFAULT_CAP


def is_foreign(harness: str | Adapter | None, payload: Mapping[str, object] | None,
               env: Mapping[str, str]) -> bool:
    """True when ``harness``'s registration is being run by a different harness.

    Grok loads ``.claude/settings.json`` too (it sets ``GROK_HOOK_EVENT``), and Cursor can load
    Claude hooks as third-party hooks (its payload has a string ``cursor_version``); the hook
    should then print nothing, the other harness's own registration does the work.
    """
    adapter = resolve(harness)
    if adapter is None:
        return False
    if any(env.get(name) for name in adapter.standdown_env):
        return True
    return adapter.name != "cursor" and isinstance((payload or {}).get("cursor_version"), str)


def fit_inline(parts: list[tuple[str, str]], cap: int, state_dir: StrPath, notices: str = "") -> str:
    """Fit a digest to ``cap`` characters; see :func:`supervisor.adapters._inline.fit_inline`.

    ``parts`` are ``(stage name, stage text)`` in declared order, ``notices`` the banners and
    notices kept first. Over the cap the whole digest is saved under ``state_dir/digests/`` and
    each cut stage is replaced by one line naming its size and that file.
    """
    total = len(notices) + sum(len(t) + 1 for _, t in parts)
    if total <= cap:  # fast path: nothing to cut, no file code loaded
        return "".join(t if t.endswith("\n") else t + "\n" for t in (notices, *(t for _, t in parts)) if t)
    from ._inline import fit_inline as _fit

    return _fit(parts, cap, state_dir, notices)


def _looks_like_json(text: str) -> bool:
    return text.lstrip()[:1] in ("{", "[")


def render(harness: str | Adapter | None, text: str, *, state_dir: StrPath, kind: str = "digest",
           cap: int | None = None) -> bytes:
    """The exact bytes our hook prints on stdout for ``harness``.

    Args:
        harness: adapter name, or the adapter itself (:func:`resolve`); an unknown name gets
            the plain envelope and :data:`DEFAULT_CAP`.
        text: what the model should see (digest, re-emit, nudge line, deferred result).
        state_dir: where a digest over the inline cap is saved whole.
        kind: one of :data:`KINDS`; picks the ``hookEventName`` (``prompt`` -> the harness's
            per-prompt event, ``post-tool`` -> ``PostToolUse``, else the session event). Every
            kind but ``nudge`` is held to the inline cap.
        cap: inline cap in characters (default: :func:`inline_cap` without overrides).

    Returns:
        ``b""`` for empty or blank text (print nothing). Otherwise, by envelope:
        ``hook-specific`` (Claude, Codex, Gemini, Qwen): one line of JSON
        ``{"hookSpecificOutput": {"hookEventName": E, "additionalContext": T}}``; ``cursor``:
        ``{"additional_context": T}``; ``copilot``: ``{"additionalContext": T}``; ``cline``:
        ``{"contextModification": T}``; ``plain``
        (Grok, unknown, and every ``summary``): the text, newline-terminated,
        prefixed by a label line if it would otherwise start like JSON (Codex treats stdout that
        looks like JSON but does not parse as an error). UTF-8; lone surrogates become U+FFFD.

    Raises:
        ValueError: unknown ``kind``.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown output kind {kind!r} (one of {', '.join(KINDS)})")
    if not text.strip():
        return b""
    if not text.isascii():
        from .._sanitize import well_formed

        text = well_formed(text)  # lone surrogates -> U+FFFD
    limit = cap if cap is not None else inline_cap(harness)
    if kind != "nudge" and len(text) > limit:
        from ._inline import fit_inline as _fit, fit_prefix, split_sections

        parts, notices = split_sections(text)
        if len(parts) == 1 and parts[0][0] == "digest":  # no stage headings to cut at
            text = fit_prefix(parts[0][1], limit, state_dir, notices)
        else:
            text = _fit(parts, limit, state_dir, notices)
    adapter = resolve(harness)
    envelope = adapter.envelope if adapter and kind != "summary" else "plain"
    if envelope == "plain":
        if _looks_like_json(text):
            text = "supervise digest:\n" + text
        return (text if text.endswith("\n") else text + "\n").encode("utf-8")
    from .._jsontext import dumps

    if envelope == "cursor":
        obj: dict[str, object] = {"additional_context": text}
    elif envelope == "copilot":
        obj = {"additionalContext": text}
    elif envelope == "cline":
        obj = {"contextModification": text}
    else:
        assert adapter is not None
        obj = {"hookSpecificOutput": {"hookEventName": adapter.event_name(kind),
                                      "additionalContext": text}}
    return (dumps(obj, ensure_ascii=False) + "\n").encode("utf-8")
