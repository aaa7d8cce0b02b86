"""The ``memory`` stage's body (its program, ``__main__.py``, decides "no store" and only
then imports and runs it): the recap of a ``.remember/``-style memory store.

A program file is compiled on every run; a module is read from its cached bytecode. The body
lives here so a digest does not recompile its 300 lines at each session start.
"""

from __future__ import annotations

import datetime as _dt
import time
from dataclasses import dataclass, field
from pathlib import Path

from memory import common
from memory import store as store_mod

TITLE = "## Memory"


def _o(value: object) -> str:
    """A path or name from the tree as one line (:func:`supervisor._sanitize.one_line`)."""
    from supervisor._sanitize import one_line

    return one_line(str(value))


REFUSAL_WHY = "planted memory is prompt injection"


@dataclass
class Item:
    """One memory file: ``body`` is None when only its path is shown, ``why`` says why."""

    key: str
    path: Path
    size: int
    body: str | None = None
    why: str = ""
    cut: bool = False
    note: str = ""


@dataclass
class Recap:
    """Everything the stage prints, assembled before the budget is applied."""

    store: Path
    compact: bool
    handoff: list[str] = field(default_factory=list)
    handoff_body: str | None = None
    handoff_path: Path | None = None
    items: list[Item] = field(default_factory=list)
    slices: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    consolidation: str = ""

    def render(self) -> str:
        out = [TITLE]
        if self.handoff_path is not None:
            out += ["", f"### Last handoff ({_o(self.handoff_path)})", *self.handoff]
            if self.handoff_body is not None:
                out.append(self.handoff_body.rstrip("\n"))
        out += ["", "### Memory store",
                f"History lives in {_o(self.store)}: now.md (session buffer), today-*.md (daily "
                "staging), recent.md, archive.md, rotated archive-*.md/recent-*.md slices, "
                "core-memories.md. Read or grep them on request."]
        shown = [i for i in self.items if i.body is not None]
        withheld = [i for i in self.items if i.body is None]
        for item in shown:
            out += ["", f"--- {_o(item.path.name)} ({_o(item.path)}, {item.size} bytes) ---",
                    *([item.note] if item.note else []),
                    item.body.rstrip("\n")]  # type: ignore[union-attr]
        for why in dict.fromkeys(i.why for i in withheld):
            out += ["", why]
            out += [f"- {_o(i.path)} ({i.size} bytes)" for i in withheld if i.why == why]
        if self.slices:
            out += ["", "Rotated archives (not shown; grep on request):", *self.slices]
        if self.refused:
            out += ["", *self.refused]
        if self.consolidation:
            out += ["", self.consolidation]
        return "\n".join(out) + "\n"


def _budget_why(max_bytes: int) -> str:
    return (f"Left out to stay within the memory budget (max_bytes = {max_bytes}); "
            "kept on disk, read on request:")


def fit(recap: Recap, max_bytes: int) -> str:
    """Render ``recap`` in at most ``max_bytes`` UTF-8 bytes (brief memory.md #5).

    Drops bodies in :data:`DROP_ORDER`; then cuts the protected bodies (core memories, the
    handoff, identity last) with a marker naming the file; then, if the frame alone is too
    big, cuts the text itself with a final marker.
    """
    def size() -> int:
        return len(recap.render().encode("utf-8"))

    by_key = {i.key: i for i in recap.items}
    for key in store_mod.DROP_ORDER:
        if size() <= max_bytes:
            return recap.render()
        item = by_key.get(key)
        if item is not None and item.body is not None:
            item.body, item.why = None, _budget_why(max_bytes)
    for target in ("core", "handoff", "identity"):
        over = size() - max_bytes
        if over <= 0:
            break
        if target == "handoff":
            if recap.handoff_body is None:
                continue
            path, body = recap.handoff_path, recap.handoff_body
        else:
            item = by_key.get(target)
            if item is None or item.body is None:
                continue
            path, body = item.path, item.body
        marker = f"\n[... cut to fit the memory budget (max_bytes = {max_bytes}); full file: {_o(path)}]"
        raw = body.encode("utf-8")
        keep = common.cut_utf8(raw, max(len(raw) - over - len(marker.encode()), 0))
        new = keep.decode("utf-8", "replace") + marker
        if target == "handoff":
            recap.handoff_body = new
        else:
            item.body = new  # type: ignore[union-attr]
            item.cut = True  # type: ignore[union-attr]
    text = recap.render()
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    marker = b"\n[... memory recap cut at max_bytes]\n"
    return (common.cut_utf8(data, max(max_bytes - len(marker), 0)) + marker)[:max_bytes].decode(
        "utf-8", "replace")


def _special(path: Path) -> str:
    """``a FIFO`` (socket, device, directory) for what is not a regular file, else ``""``;
    checked with ``lstat``, never opened (opening a FIFO would block)."""
    import stat

    try:
        mode = path.lstat().st_mode
    except OSError:
        return ""
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return ""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return f"{name}, not a regular file"
    return "a device, not a regular file"


def _read(path: Path, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of regular file ``path``, through the one door
    (:func:`supervisor.state._intake.read`: never through a link, never blocking, never in
    ``/proc``, ``/sys`` or ``/dev``; a file swapped for a FIFO after the checks is not read).
    None when it cannot be read."""
    from supervisor.state._intake import Got

    got = common.read_memory(path, limit)
    return got.data if isinstance(got, Got) else None


def untrack_fix(store: Path, project: Path) -> str:
    """``doctor``'s fix for a memory store git tracks (``supervisor._git.untrack_fix``)."""
    from supervisor._git import untrack_fix as fix

    try:
        rel = store.resolve().relative_to(project.resolve()).as_posix()
    except (ValueError, OSError, RuntimeError):
        rel = store.name
    return fix(rel)


def build(env: common.StageEnv, opts: common.Options, store: Path, today: _dt.date) -> Recap | None:
    """Assemble the recap; None when there is nothing to say."""
    recap = Recap(store=store, compact=env.compact)
    file_cap = opts.whole("file_max_bytes", 200_000, minimum=1)
    max_redeliveries = opts.whole("max_redeliveries", 3)
    handoff_path = store / Path(opts.text("handoff", "remember.md")).name
    files = store_mod.memory_paths(store, today)
    present = [(k, p) for k, p in [("handoff", handoff_path), *files] if p.exists() or p.is_symlink()]
    tracked, problem = common.git_tracked(env.project_dir, [p for _, p in present])
    if problem:
        common.log(env, problem)
    refused: set[Path] = set()
    is_tracked = "tracked by the project's git" if problem is None else "not checked: git cannot say whether it is tracked"
    for _, path in present:
        why = ("a symlink" if path.is_symlink() else
               _special(path) or (is_tracked if path in tracked else ""))
        if why:
            refused.add(path)
            line = (f"Not read {_o(path)}: {why}." if why.endswith("not a regular file") else
                    f"Refused {_o(path)}: {why} ({REFUSAL_WHY}); not injected.")
            recap.refused.append(line)
            common.log(env, line)
    if tracked & refused:  # the fix doctor gives, from the one place both take it
        recap.refused.append(problem or f"Fix: {untrack_fix(store, env.project_dir)}.")

    # The handoff note: never consumed, counted per machine, first in the output.
    if handoff_path not in refused:
        content = _read(handoff_path, file_cap) if handoff_path.is_file() else None
        from memory.handoff import deliver

        binary = content is not None and b"\0" in content
        delivery = deliver(env.state_dir, handoff_path, None if binary else content,
                           compact=env.compact, preview=env.preview)
        if delivery.problem:
            common.log(env, delivery.problem)
        if binary:  # named with the true reason, never counted as delivered
            line = f"Not shown {_o(handoff_path)}: binary (it contains NUL bytes); not read."
            recap.refused.append(line)
            common.log(env, line)
        elif content is not None and content.strip():
            recap.handoff_path = handoff_path
            if delivery.prior:
                times = "time" if delivery.prior == 1 else "times"
                recap.handoff.append(
                    f"[Already delivered {delivery.prior} {times} since {delivery.since or 'an unknown time'}: "
                    "a pending note, not news; it may already have been acted on. Writing a new "
                    "handoff replaces it.]")
            if max_redeliveries and delivery.number > max_redeliveries:
                recap.handoff.append(
                    f"[Body not repeated: delivery {delivery.number} of unchanged content is past "
                    f"max_redeliveries = {max_redeliveries} (memory stage option). Read it at "
                    f"{_o(handoff_path)} if needed; a changed handoff is shown in full"
                    + (f"; deleting {env.state_dir / 'memory' / 'handoff.delivered'} starts the "
                       "count again" if env.state_dir else "") + ".]")
            else:
                recap.handoff_body, note = common.decode_clean(content, handoff_path)
                if note:
                    recap.handoff.append(note)

    for key, path in files:
        if path in refused or not path.is_file():
            continue
        try:
            size = path.stat().st_size
        except OSError:
            continue
        item = Item(key=key, path=path, size=size)
        if env.compact and key != "identity":
            item.why = ("Not re-injected at compact (delivered at session start); "
                        "read or grep on request:")
        elif size > file_cap and key not in store_mod.PROTECTED:
            item.why = f"Over the per-file cap (file_max_bytes = {file_cap}); kept on disk:"
        else:
            data = _read(path, file_cap)
            if data is None or not data.strip():
                continue
            if b"\0" in data:
                item.why = "Binary (it contains NUL bytes); not shown:"
                recap.items.append(item)
                continue
            item.body, item.note = common.decode_clean(data, path)
            if size > file_cap:
                item.body += f"\n[... cut at file_max_bytes = {file_cap}; full file: {_o(path)}]"
        if size == 0:
            continue
        recap.items.append(item)

    slices = store_mod.rotated_slices(store)
    shown = opts.whole("slices_shown", 10)
    recap.slices = [f"- {_o(s.path)} ({s.size} bytes)" for s in slices[:shown]]
    rest = slices[shown:]
    if rest:
        recap.slices.append(f"- ... and {len(rest)} older: {_o(store_mod.slice_globs(store, rest))}")

    if not env.compact:
        recap.consolidation = _consolidation(env, opts, store, today)

    if not (recap.handoff_path or recap.items or recap.slices or recap.refused or recap.consolidation):
        return None
    return recap


def _consolidation(env: common.StageEnv, opts: common.Options, store: Path, today: _dt.date) -> str:
    pending = store_mod.pending_staging(store, today)
    if not pending:
        return ""
    days = f"{len(pending)} day(s) of memory staging to consolidate ({pending[0].name}"
    days += f" .. {pending[-1].name})" if len(pending) > 1 else ")"
    argv = opts.argv("consolidate")
    if argv is None:
        return f"Memory consolidation: {days}; no `consolidate` command is configured."
    if env.state_dir is None:
        return f"Memory consolidation: {days}; not started (no state dir for its lock)."
    if env.preview:
        return f"Memory consolidation: {days}; the next session start runs it (not a preview)."
    from memory.consolidate import trigger

    try:
        state, pid = trigger(env.state_dir, store, env.project_dir, argv,
                             timeout=opts.seconds("consolidate_timeout", 600.0), stage=env.stage)
    except OSError as err:
        common.log(env, f"cannot start consolidation {argv!r}: {err}")
        return f"Memory consolidation: {days}; could not start it ({err.strerror or err})."
    if state == "running":
        return f"Memory consolidation: {days}; a consolidation is already running."
    common.log(env, f"consolidation started, wrapper pid {pid}: {argv!r}")
    return f"Memory consolidation: {days}; running consolidation in the background (pid {pid})."


SLOW_SECONDS = 5.0
"""A run longer than this (seconds) is logged as slow (claude-remember's slow-start log)."""


def shared_home(env: common.StageEnv, opts: common.Options, folder: str) -> common.StageEnv:
    """``env`` as the store's owner sees it: in a linked worktree with a relative ``dir`` and
    ``share_worktrees`` (default true), the main checkout (as claude-remember keys a
    worktree's memory to it, its PR #127), whose state dir then keeps the store's own records
    (the handoff delivery count, the consolidation lock), so two worktrees never double-count
    or consolidate at once. The digest's own state dir (``SUPERVISE_STATE_DIR``) is the
    main checkout's too when it is the default ``<project>/.supervise``; an explicit one is
    kept (one per machine already). ``env`` unchanged otherwise."""
    import dataclasses
    import os

    if not opts.flag("share_worktrees", True) or os.path.isabs(os.path.expanduser(folder)):
        return env
    from supervisor.state._project import STATE_DIR_NAME, main_checkout

    main = main_checkout(env.project_dir)
    if main is None:
        return env
    state = env.state_dir
    if state is not None and state == env.project_dir / STATE_DIR_NAME:
        state = Path(main) / STATE_DIR_NAME
    return dataclasses.replace(env, project_dir=Path(main), state_dir=state)


def main() -> int:
    started = time.monotonic()
    env, problems = common.read_env("memory")
    opts = common.Options(env.options)
    home = shared_home(env, opts, opts.text("dir", ".remember"))
    store = common.resolve_path(home.project_dir, opts.text("dir", ".remember"))
    max_bytes = opts.whole("max_bytes", 9000, minimum=200)
    want_exposure = opts.flag("exposure", True)
    if not store.is_dir():
        for line in problems + opts.problems:
            common.log(env, line)
        return 0
    hop = common.symlink_in(store, common.anchor_for(home.project_dir, store))
    if hop is not None:
        line = f"Refused memory store {_o(store)}: {_o(hop)} is a symlink ({REFUSAL_WHY}); nothing injected."
        common.log(env, line)
        common.emit(f"{TITLE}\n{line}\n")
        return 0
    # `today` pins the date staging files are judged against (reproducible runs, tests that
    # cross midnight); default: the local date.
    recap = build(home, opts, store, opts.date("today") or _dt.date.today())
    for line in problems + opts.problems:
        common.log(env, line)
    if recap is None:
        return 0
    common.emit(fit(recap, max_bytes))
    if want_exposure:
        if recap.handoff_body is not None and recap.handoff_path is not None:
            common.record_exposure(env, recap.handoff_path, len(recap.handoff_body.encode()))
        for item in recap.items:
            if item.body is not None:
                common.record_exposure(env, item.path, len(item.body.encode()))
    took = time.monotonic() - started
    if took > SLOW_SECONDS:
        common.log(env, f"slow run: {took:.1f}s (store {store})")
    return 0
