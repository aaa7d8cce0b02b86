"""Nested AGENTS.md on demand: when the agent reads a file in a subtree (below the session's cwd)
that has its own ``AGENTS.md``, inject that file once per session and compaction epoch.

Behaviour follows OpenCode's nested-instruction loader and its fix for lost re-injection after
compaction (anomalyco/opencode PR #43723, seed ``003``): the in-flight claim only guards a load
while it runs and is released when the load settles; the durable ledger is the single authority,
and compaction makes it forget. Here the claim is an ``fcntl.flock`` on a per-session lock file
(released by the kernel even if the process dies, so never held forever), and the ledger is a
per-session JSON file in the state dir carrying the session's compaction epoch::

    <state_dir>/nested/<sha256(session_id)[:32]>.json
    {"version": 1, "epoch": 2, "injected": {"<real path>": 2}, "retry_at": {"<real path>": 1.7e9},
     "in_flight": {"<real path>": {"epoch": 2, "pid": 4242, "at": 1.7e9}}}

A path counts as delivered only when ``injected[path] == epoch``. Between a hook's pick and
its envelope going out (the injection is only reserved until then, issue 11), the path is
``in_flight`` (:func:`supervisor.state._delivery.in_flight`): parallel hooks of the session
(Claude fires ``PostToolUse`` for several ``Read`` tools at once) skip it while its holder
lives, so it is injected once; the commit moves it to ``injected``, a failed write drops it,
and a killed holder's mark is void. :func:`advance_epoch` (to be
called by the session protocol at ``compact`` and ``clear``) bumps the epoch, so the next read in
the subtree injects again. An unreadable file is skipped and retried after ``retry_after``
seconds (a negative cache: no read storm, never a blocking open).

The per-event shim (``supervisor/hook-fast.sh``) answers a read under an already injected
file without Python from the session's injected index
(:func:`supervisor.session._fastpath.mark_injected`): entries are added here after the ledger
recorded them, and the index is removed before the ledger forgets anything (a new epoch, a
missing or corrupt ledger, an overgrown one started over), all under the claim.

Entry points: :func:`handle_post_tool` (Claude ``PostToolUse`` payload), :func:`advance_epoch`,
and ``python -m supervisor.session._nested post-tool|advance-epoch`` (payload on stdin) for scripts.
"""

from __future__ import annotations

import os
import sys
import time

from .. import _jsontext
from .._harnesses import FILE_TOOLS  # the tools whose ``tool_input`` names one file (every row's)
from .._hashing import sha256
from .._errors import StateError
from .._sanitize import one_line, removed_note
from ..state._intake import MAX_BYTES, Refused, Scope, Text, identity, judge, project_scope, read_text

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from _typeshed import StrPath
    from ..config._context import SessionContext

#: Per directory, the first of these that exists is that subtree's instruction file (Codex order).
NAMES = ("AGENTS.override.md", "AGENTS.md")
RETRY_AFTER = 30.0  # seconds before an unreadable instruction file is tried again
LOCK_WAIT = 2.0  # seconds to wait for another hook process's in-flight load of this session
MAX_INJECT_BYTES = 32 * 1024  # per injection, whole files only; bigger ones are named
_MAX_READ = MAX_BYTES  # the door's cap: a bigger nested file is named, never read
_MAX_LEDGER = 256 * 1024  # bytes: a session's ledger; a bigger file is corrupt (set aside)


def _imports_agents(text: str) -> bool:
    """Whether ``text`` (a CLAUDE.md) imports its folder's AGENTS.md: a whitespace-separated
    ``@AGENTS.md`` or ``@./AGENTS.md`` (what ``(?:^|\\s)@(?:\\./)?AGENTS\\.md(?:\\s|$)`` matches:
    ``str.split`` and ``\\s`` use the same whitespace, without importing ``re``)."""
    return "AGENTS.md" in text and any(word in ("@AGENTS.md", "@./AGENTS.md") for word in text.split())


def _ledger_base(context: SessionContext, session_id: str) -> str:
    key = sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return os.path.join(context.state_dir, "nested", key)


class _Claim:
    """An exclusive ``flock`` on ``<state>/nested/<key>.lock``, waited for at most ``wait``
    seconds, through the state door (:mod:`supervisor.state._statedir`: no link followed, a planted
    ledger set aside). ``acquired`` is False when another process still holds it after
    ``wait``; the kernel drops the lock when the holder exits, so a crash never leaves it held.

    Raises:
        StateError: the state dir or the ledger folder cannot be used (a symlinked state dir).
    """

    def __init__(self, base: str, wait: float, session_id: str = "") -> None:
        from contextlib import ExitStack

        from ..state._statedir import StateDir

        self.base = base
        parent, self.key = os.path.split(base)
        self.session_id = session_id
        self.state_dir = os.path.dirname(parent)
        self._stack = ExitStack()
        try:
            state = self._stack.enter_context(StateDir.open(self.state_dir, create=True))
            folder = state.sub(os.path.basename(parent), create=True)
            assert folder is not None
            self.folder = self._stack.enter_context(folder)
            self.acquired = self._stack.enter_context(self.folder.flock(f"{self.key}.lock", wait, poll=0.01))
        except BaseException as err:
            self._stack.close()
            if isinstance(err, StateError):
                raise StateError(f"cannot use the nested-instructions ledger: {err}") from err
            raise

    def release(self) -> None:
        """Release the lock and close the folders."""
        self._stack.close()


def _load(claim: _Claim) -> dict[str, object]:
    """The claimed session's ledger; a missing or corrupt one starts empty, and then the
    session's injected index goes first (it may only hold what the ledger holds).

    Raises:
        StateError: the injected index could not be removed.
    """
    try:
        data = claim.folder.read_json(f"{claim.key}.json", _MAX_LEDGER)
    except StateError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    epoch = data.get("epoch")
    # one test for "usable" (a JSON true or false is a Python int, never an epoch): a ledger
    # that starts over drops the index, or the shim would answer from entries it no longer counts
    usable = type(epoch) is int and isinstance(data.get("injected"), dict)
    if not usable:
        _forget_index(claim)
    return {
        "version": 1,
        "epoch": epoch if usable else 0,
        "injected": data["injected"] if usable else {},
        "retry_at": data.get("retry_at") if isinstance(data.get("retry_at"), dict) else {},
        "in_flight": (data.get("in_flight") if usable and isinstance(data.get("in_flight"), dict)
                      else {}),
    }


def _save(claim: _Claim, ledger: dict[str, object]) -> None:
    data = _jsontext.dumps(ledger, sort_keys=True).encode("utf-8", "surrogatepass")
    if len(data) > _MAX_LEDGER:  # thousands of nested files: start the session's ledger over
        _forget_index(claim)
        ledger = {**ledger, "injected": {}, "retry_at": {}, "in_flight": {}}
        data = _jsontext.dumps(ledger, sort_keys=True).encode("utf-8", "surrogatepass")
    claim.folder.write(f"{claim.key}.json", data)


def _forget_index(claim: _Claim) -> None:
    """Remove the claimed session's injected index (the ledger is about to forget).

    Raises:
        StateError: it is still there.
    """
    from ._fastpath import forget_injected

    forget_injected(claim.state_dir, claim.session_id)


def _index(claim: _Claim, plain: list[str]) -> None:
    """Add ``plain`` (injected files whose real path is their path) to the claimed session's
    injected index; best effort (a missing entry costs a Python start, never a delivery)."""
    if plain:
        from ._fastpath import mark_injected

        mark_injected(claim.state_dir, claim.session_id, plain)


_ANYWHERE = Scope((), anywhere=True)
"""The door's scope for a CLAUDE.md read only to see whether it imports its AGENTS.md."""


def subtree_file(directory: str | os.PathLike[str]) -> str | None:
    """The instruction file of ``directory`` (a path or a path string): the first of
    :data:`NAMES` present there (a link, dangling or not, and a FIFO count as present, so they
    are named rather than skipped for the next name), else None. One rule for the post-tool
    injection and the digest's listing of nested files (stages/instructions/__main__.py), so
    both name the same file. The listing asks once per folder of the project (thousands).
    Returns a ``str``."""
    for name in NAMES:
        candidate = os.path.join(directory, name)
        if os.path.lexists(candidate):
            return candidate
    return None


def scope_of(project_dir: StrPath, cwd: StrPath) -> Scope:
    """Where a nested instruction file may lead: the project, the session's cwd, the main
    checkout of a linked worktree (:func:`supervisor.state._intake.project_scope`)."""
    return project_scope(project_dir, cwd)


def listing_note(path: StrPath, scope: Scope) -> str | None:
    """Why :func:`handle_post_tool` would not inject ``path``, told without reading it (the
    door's :func:`~supervisor.state._intake.judge`: a link out of ``scope`` or into
    ``/proc``, ``/sys``, ``/dev``; not a regular file; over 4 MiB), else None. For the
    digest's listing of nested files."""
    refused = judge(path, scope, cap=_MAX_READ)
    return None if refused is None else refused.reason


def _claude_loads(directory: StrPath, candidate: StrPath) -> bool:
    """True when Claude Code itself loads ``candidate`` with the directory's nested CLAUDE.md:
    a CLAUDE.md that is the same file (symlinked pair) or that imports ``@AGENTS.md``."""
    mine = identity(candidate)
    for claude in (os.path.join(directory, "CLAUDE.md"), os.path.join(directory, ".claude", "CLAUDE.md")):
        if not os.path.isfile(claude):
            continue
        if mine is not None and identity(claude) == mine:  # a link or a hard link: one file
            return True
        got = read_text(claude, _ANYWHERE, cap=_MAX_READ)
        if (isinstance(got, Text) and os.path.basename(candidate) == "AGENTS.md"
                and _imports_agents(got.text)):
            return True
    return False


def _below(path: str, base: str) -> list[str] | None:
    """The parts of ``path`` below ``base`` (both absolute and normalised), ``[]`` when they
    are the same, None when ``path`` is not under ``base``: ``PurePath.relative_to``'s test."""
    if path == base:
        return []
    prefix = base.rstrip("/") + "/"
    if not path.startswith(prefix):
        return None
    return [part for part in path[len(prefix):].split("/") if part]


def _claude_file(directory: str) -> bool:
    """``directory`` holds a CLAUDE.md, .claude/CLAUDE.md or CLAUDE.local.md with text."""
    for name in ("CLAUDE.md", os.path.join(".claude", "CLAUDE.md"), "CLAUDE.local.md"):
        got = read_text(os.path.join(directory, name), _ANYWHERE, cap=_MAX_READ)
        if isinstance(got, Text) and got.text.strip():
            return True
    return False


def _claude_loads_agents(directory: str) -> bool:
    """Claude Code >= 2.1.281 (the harness table's ``claude-agents`` rule) loads ``AGENTS.md``
    of ``directory`` itself on a read below it: no directory from the filesystem root down to
    it holds a non-empty CLAUDE file."""
    here = os.path.normpath(directory)
    while True:
        if _claude_file(here):
            return False
        parent = os.path.dirname(here)
        if parent == here:
            return True
        here = parent


def harness_rule(harness: str, version: str = "", session_id: str = "") -> str:
    """The harness table's loader rule for ``harness`` at ``version``; with no version given,
    the version of the harness process among our ancestors (learned only when the row has
    version-dependent rules)."""
    from .._harnesses import BY_NAME

    row = BY_NAME.get(harness)
    if row is None:
        return ""
    if not version and row.eras:
        from ._ancestry import ancestry, find_harness, installed_version

        found = find_harness(ancestry(), session_id)
        if found is not None and found.harness == harness:
            version = installed_version(found.ident.pid, harness)
    return row.loads_at(version)


def nested_files(file_path: StrPath, cwd: StrPath, harness: str = "claude",
                 rule: str | None = None) -> list[str]:
    """Instruction files (``str`` paths) of the subtrees holding ``file_path``, strictly below
    ``cwd``, outermost first; both arguments absolute. Files the harness loads by itself are
    left out (for Claude: an AGENTS.md that is its directory's CLAUDE.md or is imported by it;
    under the ``claude-agents`` rule, ``rule``, also one with no CLAUDE file from the root
    down to its directory). Dangling or unreadable entries are kept so the caller can record
    and retry them."""
    folder, cwd = os.path.normpath(os.path.dirname(file_path)), os.path.normpath(cwd)
    rel = _below(folder, cwd)
    if rel is None:  # a path given through a symlink: compare real paths
        rel = _below(os.path.realpath(folder), os.path.realpath(cwd))
        if rel is None:
            return []
    out = []
    directory = cwd
    for part in rel:
        directory = os.path.join(directory, part)
        candidate = subtree_file(directory)
        if candidate is None or (harness == "claude" and _claude_loads(directory, candidate)):
            continue
        if harness == "claude" and os.path.basename(candidate) == "AGENTS.md":
            if rule is None:
                rule = harness_rule(harness)
            if rule == "claude-agents" and _claude_loads_agents(directory):
                continue  # Claude Code loads it itself on this read
        out.append(candidate)
    return out


def _target(payload: dict[str, object], context: SessionContext) -> tuple[str, str] | None:
    """``(file path, session cwd)`` named by a file tool's payload, else None."""
    if payload.get("tool_name") not in FILE_TOOLS:
        return None
    tool_input = payload.get("tool_input")
    if not isinstance(tool_input, dict):
        return None
    raw = tool_input.get("file_path") or tool_input.get("notebook_path")
    if not isinstance(raw, str) or not raw:
        return None
    cwd_raw = payload.get("cwd")
    cwd = cwd_raw if isinstance(cwd_raw, str) and os.path.isabs(cwd_raw) else os.fspath(context.project_dir)
    path = os.path.expanduser(raw)
    return os.path.abspath(os.path.join(cwd, path)), os.path.abspath(cwd)  # an absolute path wins


def _session_id(payload: dict[str, object], context: SessionContext) -> str:
    """The payload's session id cleaned as the session context's is
    (:func:`supervisor.session._payload.clean_session_id`: control characters dropped, cut to
    256 characters), so a post-tool hook writes the ledger that ``compact`` / ``clear`` /
    ``startup`` (:func:`advance_epoch`, :func:`at_session_start`) act on; the context's id
    when the payload has none."""
    from ._payload import clean_session_id

    sid = payload.get("session_id")
    cleaned = clean_session_id(sid) if isinstance(sid, str) else ""
    return cleaned or context.session_id


def handle_post_tool(payload: dict[str, object], context: SessionContext, *,
                     retry_after: float = RETRY_AFTER, lock_wait: float = LOCK_WAIT) -> str | None:
    """The nested instructions to inject after a file tool ran, or None.

    Args:
        payload: a Claude Code ``PostToolUse`` payload (``tool_name``, ``tool_input.file_path``,
            ``session_id``, ``cwd``); other tools and malformed payloads give None.
        context: the session context (``state_dir``; ``session_id`` and ``project_dir`` are used
            when the payload lacks ``session_id`` / ``cwd``; ``harness``, default Claude).
        retry_after: seconds before an unreadable instruction file is tried again.
        lock_wait: seconds to wait for a concurrent load of the same session to settle; when it
            does not, None is returned and the next read tries again.

    Returns:
        ``"Instructions from: <abs path>\\n<text>"`` blocks joined by blank lines, for files not
        yet delivered in this session's current compaction epoch; None when there are none.

    Raises:
        StateError: the ledger under ``context.state_dir`` cannot be created or written, or
            the session's injected index (:mod:`supervisor.session._fastpath`) cannot be
            removed when a missing or corrupt ledger starts over.
    """
    target = _target(payload, context)
    if target is None:
        return None
    harness = context.harness or "claude"
    candidates = nested_files(*target, harness=harness,
                              rule=harness_rule(harness, context.harness_version,
                                                _session_id(payload, context))
                              if context.harness_version else None)
    from ._rules import matching

    # path-scoped rules the harness does not load itself, covering the file read
    scoped = matching(context.state_dir, harness, target[0])
    candidates += [p for p in scoped if p not in candidates]
    if not candidates:
        return None
    session_id = _session_id(payload, context)
    base = _ledger_base(context, session_id)
    claim = _Claim(base, lock_wait, session_id)
    if not claim.acquired:
        claim.release()
        return None
    try:
        ledger = _load(claim)
        epoch, injected, retry_at = ledger["epoch"], ledger["injected"], ledger["retry_at"]
        flying = ledger["in_flight"]
        assert isinstance(injected, dict) and isinstance(retry_at, dict) and isinstance(flying, dict)
        from ..state._delivery import in_flight, in_flight_holds

        for key in [k for k, mark in flying.items()
                    if not (in_flight_holds(mark) and mark.get("epoch") == epoch)]:
            del flying[key]  # a void mark: its holder died or its epoch is over
        blocks: list[str] = []
        delivered: list[str] = []
        plain: list[str] = []  # delivered files reached through no link: the shim's index
        scope = scope_of(context.project_dir, target[1])
        used = 0
        now = time.time()
        for path in candidates:
            key = os.path.realpath(path)
            shown = one_line(str(path))  # a folder name is untrusted text (ESC, bidi, LF)
            wait_until = retry_at.get(key)
            if injected.get(key) == epoch or key in flying \
                    or (isinstance(wait_until, (int, float)) and wait_until > now):
                continue  # delivered, being delivered by a parallel hook, or to be retried
            got = read_text(path, scope, cap=_MAX_READ)
            if isinstance(got, Refused) and got.kind == "location":
                delivered.append(key)  # said once per epoch, like an injection
                if key == os.fspath(path):
                    plain.append(key)
                blocks.append(f"Instructions at {shown} not injected: {got.reason}.")
                continue
            if isinstance(got, Refused):
                retry_at[key] = now + retry_after  # negative cache: no read storm
                if got.kind not in ("unreadable", "missing") and os.path.lexists(path):
                    # a FIFO, binary or oversized file is named (with the true reason), not
                    # silently skipped; tried again after the window
                    blocks.append(f"Instructions at {shown} not injected: {got.reason}.")
                continue
            retry_at.pop(key, None)
            delivered.append(key)
            if key == os.fspath(path):
                plain.append(key)
            text, size, lossy = got.text, got.size, got.lossy
            if not text.strip():
                continue
            if used + len(text.encode("utf-8")) > MAX_INJECT_BYTES:
                blocks.append(f"Instructions at {shown} ({size} bytes) are too large to inject "
                              "here: read that file before working in its subtree.")
                continue
            used += len(text.encode("utf-8"))
            flag = " (not valid UTF-8: decoded with replacement characters)" if lossy else ""
            note = f"{removed_note(got.hidden, shown)}\n" if got.hidden else ""
            globs = scoped.get(os.fspath(path))
            if globs is not None:  # a rule: its frontmatter is metadata, not instructions
                from ._rules import split_frontmatter

                text = split_frontmatter(text)[1]
                blocks.append(f"Rule from: {shown} (for files matching "
                              f"{one_line(', '.join(globs))}){flag}\n{note}{text.rstrip()}")
                continue
            blocks.append(f"Instructions from: {shown}{flag}\n{note}{text.rstrip()}")
        delivery = context.delivery
        if delivery is None:
            injected.update(dict.fromkeys(delivered, epoch))
        elif delivered:  # counted as injected only once the envelope went out (issue 11),
            mark = {**in_flight(), "epoch": epoch}  # and in flight until then
            flying.update(dict.fromkeys(delivered, mark))
            delivery.reserve(lambda: _settle(base, delivered, lock_wait, session_id, epoch, plain),
                             lambda: _settle(base, delivered, lock_wait, session_id))
        _save(claim, ledger)
        if delivery is None:
            _index(claim, plain)
    finally:
        claim.release()
    return "\n\n".join(blocks) + "\n" if blocks else None


def _settle(base: str, keys: list[str], lock_wait: float, session_id: str = "",
            epoch: object = None, plain: list[str] | None = None) -> None:
    """Settle the in-flight marks of ``keys`` (this process's; a parallel hook's stay) once the
    envelope carrying them went out or did not. Delivered (``epoch`` given): record ``keys``
    as injected in ``epoch``, unless a compaction started a new one since, then add ``plain``
    (those of them reached through no link) to ``session_id``'s injected index. Not
    delivered (``epoch`` None): only the marks go, so the next read injects them.

    Raises:
        OSError: the ledger stayed busy or cannot be written (the marks go void when this
            process ends).
    """
    try:
        claim = _Claim(base, lock_wait, session_id)
    except StateError as err:
        raise OSError(str(err)) from err
    try:
        if not claim.acquired:
            raise OSError(f"nested-instructions ledger {base}.json stayed busy")
        try:
            ledger = _load(claim)
            injected, flying = ledger["injected"], ledger["in_flight"]
            assert isinstance(injected, dict) and isinstance(flying, dict)
            for key in keys:
                mark = flying.get(key)
                if isinstance(mark, dict) and mark.get("pid") == os.getpid():
                    del flying[key]
            current = epoch is not None and ledger["epoch"] == epoch
            if current:
                injected.update(dict.fromkeys(keys, epoch))
            _save(claim, ledger)
            if current:
                _index(claim, plain or [])
        except StateError as err:
            raise OSError(str(err)) from err
    finally:
        claim.release()


def advance_epoch(context: SessionContext, *, lock_wait: float = LOCK_WAIT) -> int:
    """Start a new compaction epoch for ``context.session_id``: every nested file counts as not
    delivered again. Call it at ``compact`` and ``clear``. Returns the new epoch (>= 1).

    Raises:
        StateError: the ledger cannot be written, the session's injected index cannot be
            removed (then the epoch stays: the shim must not answer from the old one), or a
            concurrent load held the claim for longer than ``lock_wait`` seconds.
    """
    base = _ledger_base(context, context.session_id)
    claim = _Claim(base, lock_wait, context.session_id)
    if not claim.acquired:
        claim.release()
        raise StateError(f"nested-instructions ledger {base}.json stayed busy for {lock_wait} s")
    try:
        ledger = _load(claim)
        epoch: int = int(ledger["epoch"]) + 1  # type: ignore[call-overload]
        _forget_index(claim)  # before the ledger forgets: the shim never answers from it
        ledger.update(epoch=epoch, injected={}, in_flight={})
        _save(claim, ledger)
    finally:
        claim.release()
    return epoch


def at_session_start(context: SessionContext, *, lock_wait: float = LOCK_WAIT) -> None:
    """Bring ``context.session_id``'s ledger and injected index in line with what this
    session's model has seen, at its SessionStart (``context.source``):

    - ``compact`` / ``clear``: context was lost: a new epoch (:func:`advance_epoch`), so files
      read before are injected again (the bug fixed in seed 003);
    - ``startup``: a new session has been given nothing yet, so a ledger or index already
      there was not written by it (planted in a hostile clone's ``.supervise/``, or left by an
      id reused): both are dropped (a new epoch), and the next read injects. Nothing is
      written when neither exists (two ``lstat`` calls);
    - any other source (``resume``, none): the session continues, so its ledger stands, but
      the index is rebuilt from it (an index entry the ledger does not record as injected in
      its current epoch, say one planted for a never-injected file, would make the per-event
      shim skip that injection; the shim cannot read JSON cheaply, so Python prunes). Nothing
      is done when there is no index.

    Raises:
        StateError: the ledger cannot be written, the index cannot be removed, or a
            concurrent load held the claim for longer than ``lock_wait`` seconds.
    """
    from ._fastpath import FASTPATH_DIR, NESTED_INDEX, index_name

    session_id = context.session_id
    if not session_id:
        return
    source = context.source
    if source in ("compact", "clear"):
        advance_epoch(context, lock_wait=lock_wait)
        return
    base = _ledger_base(context, session_id)
    name = index_name(session_id)
    index = os.path.join(context.state_dir, FASTPATH_DIR, NESTED_INDEX, name) if name else None
    has_index = index is not None and os.path.lexists(index)
    if source == "startup":
        if has_index or os.path.lexists(f"{base}.json"):
            advance_epoch(context, lock_wait=lock_wait)
        return
    if not has_index:
        return
    claim = _Claim(base, lock_wait, session_id)
    if not claim.acquired:
        claim.release()
        raise StateError(f"nested-instructions ledger {base}.json stayed busy for {lock_wait} s")
    try:
        ledger = _load(claim)
        epoch, injected = ledger["epoch"], ledger["injected"]
        assert isinstance(injected, dict)
        _forget_index(claim)
        _index(claim, [key for key, at in injected.items()
                       if isinstance(key, str) and at == epoch and type(at) is int
                       and os.path.isabs(key) and os.path.realpath(key) == key])
    finally:
        claim.release()


def main(argv: list[str]) -> int:
    """``python -m supervisor.session._nested post-tool|advance-epoch [--harness H]``: payload on stdin
    (``session_id``, ``cwd``, tool fields); prints the text to inject. Always exits 0."""
    from ..config._context import SessionContext

    if not argv or argv[0] not in ("post-tool", "advance-epoch"):
        sys.stderr.write("usage: python -m supervisor.session._nested post-tool|advance-epoch [--harness H]\n")
        return 2
    harness = argv[argv.index("--harness") + 1] if "--harness" in argv[:-1] else "claude"
    from ._payload import clean_session_id, decode_payload

    payload = decode_payload(sys.stdin.buffer.read(1 << 20)) or {}
    cwd = payload["cwd"] if isinstance(payload.get("cwd"), str) else os.getcwd()
    root = folder = cwd
    while not os.path.exists(os.path.join(folder, ".git")):  # the nearest folder holding .git
        folder, below = os.path.dirname(folder), folder
        if folder == below:
            break
    else:
        root = folder
    sid = payload.get("session_id")
    context = SessionContext.for_project(  # the id post-tool's ledger is keyed by (_session_id)
        root, harness=harness, session_id=clean_session_id(sid) if isinstance(sid, str) else "")
    try:
        if argv[0] == "advance-epoch":
            print(advance_epoch(context))
        elif (text := handle_post_tool(payload, context)) is not None:
            sys.stdout.buffer.write(text.encode("utf-8", "replace"))
    except StateError as err:
        sys.stderr.write(f"supervise: {err}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
