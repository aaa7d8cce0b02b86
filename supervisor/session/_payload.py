"""The hook payload: a bounded read of stdin, typed records, the source and the project dir.

A harness hands its hook a JSON object on stdin. We read it with a bound (at most
:data:`READ_TIMEOUT` seconds and :data:`MAX_PAYLOAD` bytes) because a hook that waits on a
pipe nobody closes would stall the session start. A payload over the byte bound is still read
to its end (the harness's write must not fail) and its leading whole members are used. No
stdin, a TTY, a pipe never closed, invalid JSON, binary junk and any JSON value that is not an object all
mean "no payload" (:func:`read_payload` returns ``None``); none of them is an error.

Shapes (see the brief's harness notes):

* Claude Code, Codex, Gemini, Qwen, Grok: ``session_id``, ``transcript_path``, ``cwd``,
  ``hook_event_name``, ``source`` (+ extra keys such as ``model``, ``prompt_id``).
* Cursor ``sessionStart``: no ``source``, no ``cwd``; ``workspace_roots`` (list of paths),
  ``conversation_id``/``session_id``.
"""

from __future__ import annotations

import os
import select
import sys
import time

from .. import _jsontext
from .._record import field, record
from ..config._plan import WHEN_SOURCES
from ..state._project import find_project_root
from ..state._records import load_record

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from _typeshed import StrPath
    from typing import Any

READ_TIMEOUT = 1.0
"""Seconds the hook waits for the payload on stdin (what is already waiting when they are
up is still read, for at most :data:`DRAIN_LIMIT` seconds more: see :func:`read_stdin`)."""
MAX_PAYLOAD = 1024 * 1024
"""Bytes kept of the payload; a longer one is drained to its end, and only its members whole
within the first MAX_PAYLOAD bytes are used (:func:`read_payload_data`)."""

DRAIN_LIMIT = 10.0
"""Seconds, beyond :data:`READ_TIMEOUT`, an over-long payload may take to drain: while data
keeps arriving (at most :data:`READ_TIMEOUT` apart) the read goes on, so a slow writer of a
big ``Write`` payload never meets a closed pipe; a writer stalled longer is left."""

SOURCES: tuple[str, ...] = WHEN_SOURCES
"""The recognized ``source`` values, matched exactly (no case folding, no stripping): the
one list of :data:`supervisor.config._plan.WHEN_SOURCES`, which ``when.source`` takes."""

PROJECT_DIR_ENV: tuple[str, ...] = ("CLAUDE_PROJECT_DIR", "CURSOR_PROJECT_DIR", "GEMINI_PROJECT_DIR")
"""Environment variables a harness sets to the project directory, in the order we trust them."""


@record
class HookPayload:
    """The Claude/Codex/Gemini-shaped SessionStart payload; unknown keys are kept in ``extra``.

    A known key with a value of the wrong type is dropped (treated as absent) rather than
    failing: a harness that sends ``"source": 5`` gets an unrecognized source, not a crash.
    """

    session_id: str | None = None
    transcript_path: str | None = None
    cwd: str | None = None
    hook_event_name: str | None = None
    source: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@record
class CursorPayload:
    """Cursor's ``sessionStart`` payload: no ``source``, the project in ``workspace_roots[0]``.

    Non-string roots are dropped; a ``workspace_roots`` that is not a list is absent.
    """

    session_id: str | None = None
    conversation_id: str | None = None
    hook_event_name: str | None = None
    transcript_path: str | None = None
    workspace_roots: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


Payload = HookPayload | CursorPayload


@record
class StdinRead:
    """What a bounded read of stdin found.

    ``data``: the whole payload (bytes), or ``None`` when there is none usable (no stdin, a
    TTY, EOF not reached in time, or over the byte bound). ``head``: the first ``max_bytes``
    bytes when the payload was over the bound (else ``b""``). ``oversize``: the payload was
    over the bound; the rest was still read to its end (or the deadline) and discarded, so the
    harness's write never fails because the hook left early.
    """

    data: bytes | None
    head: bytes = b""
    oversize: bool = False


def read_stdin(fd: int = 0, *, timeout: float = READ_TIMEOUT,
               max_bytes: int = MAX_PAYLOAD) -> StdinRead:
    """Read ``fd`` until EOF within ``timeout`` seconds, keeping at most ``max_bytes`` bytes.

    A payload over ``max_bytes`` is drained to EOF (while data keeps coming at most
    ``timeout`` seconds apart, for at most :data:`DRAIN_LIMIT` seconds more) and its first
    ``max_bytes`` bytes kept in :attr:`StdinRead.head`: a PostToolUse ``Write`` of a 10 MB
    file must not see EPIPE. The timeout bounds the writer's silence: data already waiting
    when it expires (this process was descheduled, not the writer slow) is still read, up to
    :data:`DRAIN_LIMIT` seconds past the timeout. Never raises for I/O reasons.
    """
    if fd == 0 and sys.stdin is None:
        return StdinRead(None)  # started with fd 0 closed: whatever holds fd 0 now is not ours
    try:
        if os.isatty(fd):
            return StdinRead(None)
    except OSError:
        return StdinRead(None)
    deadline = time.monotonic() + timeout
    drain_end = deadline + DRAIN_LIMIT
    chunks: list[bytes] = []
    size = 0
    try:
        while True:
            now = time.monotonic()
            if now >= drain_end:
                break
            # Past the deadline, what is already waiting is still read (a poll): the deadline
            # bounds the writer's silence, not a stall of this process (a starved host can
            # deschedule the hook for longer than the timeout between two reads, while the
            # whole payload and its EOF wait in the pipe).
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - now))
            if not ready:
                break
            chunk = os.read(fd, 65536)
            if not chunk:
                whole = b"".join(chunks)
                if size > max_bytes:
                    return StdinRead(None, whole[:max_bytes], True)
                return StdinRead(whole)
            if size <= max_bytes:
                chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:  # draining: go on while the writer keeps writing
                deadline = min(max(deadline, time.monotonic() + timeout), drain_end)
    except (OSError, ValueError):
        pass
    if size > max_bytes:
        return StdinRead(None, b"".join(chunks)[:max_bytes], True)
    return StdinRead(None)


def read_stdin_bounded(fd: int = 0, *, timeout: float = READ_TIMEOUT,
                       max_bytes: int = MAX_PAYLOAD) -> bytes | None:
    """Read ``fd`` until EOF within ``timeout`` seconds and ``max_bytes`` bytes.

    Returns:
        The bytes read, or ``None`` when there is no usable stdin: ``fd`` closed or invalid,
        a TTY, EOF not reached in time (a pipe never closed), or more than ``max_bytes``
        (drained all the same: see :func:`read_stdin`).
    Never raises for I/O reasons.
    """
    return read_stdin(fd, timeout=timeout, max_bytes=max_bytes).data


def read_payload_data(fd: int = 0) -> dict[str, Any] | None:
    """The hook payload as a JSON object, read with :func:`read_stdin`.

    Over :data:`MAX_PAYLOAD` bytes, the members whole within the first :data:`MAX_PAYLOAD`
    bytes are used (:func:`decode_prefix`: ``cwd``, ``session_id``, ``tool_name`` and
    ``tool_input.file_path`` come before a Write's ``content`` in every harness we know), and
    one line on stderr says so; ``None`` when nothing usable was found.
    """
    read = read_stdin(fd)
    if not read.oversize:
        return decode_payload(read.data)
    data = decode_prefix(read.head)
    if data is None:
        print(f"supervise hook: payload over {MAX_PAYLOAD} bytes and its start is not a JSON "
              "object; ignored", file=sys.stderr)
    return data


def decode_prefix(raw: bytes) -> dict[str, Any] | None:
    """The members of the JSON object that ``raw`` begins (``raw`` may be cut off anywhere):
    every member whose value is whole, and, for an object value cut off, its whole members
    (recursively). A repeated key keeps its first whole value, as :func:`decode_payload` does.

    Returns:
        The object found, or ``None`` when ``raw`` does not begin a JSON object.
    """
    text = raw.decode("utf-8", "ignore")
    found = _prefix_object(text, 0)
    return found[0] if found is not None else None


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _prefix_object(text: str, i: int, depth: int = 0) -> tuple[dict[str, Any], int, bool] | None:
    """``(members, end, whole)`` of the object at ``text[i]``, or None when none starts there."""
    i = _skip(text, i)
    if i >= len(text) or text[i] != "{":
        return None
    out: dict[str, Any] = {}
    i = _skip(text, i + 1)
    if text[i:i + 1] == "}":
        return out, i + 1, True
    while True:
        try:
            key, i = _jsontext.raw_decode(text, _skip(text, i), object_pairs_hook=first_wins)
        except (ValueError, RecursionError):
            return out, i, False
        i = _skip(text, i)
        if not isinstance(key, str) or text[i:i + 1] != ":":
            return out, i, False
        i = _skip(text, i + 1)
        if text[i:i + 1] == "{" and depth < 16:  # deeper: whole values only (no recursion)
            inner = _prefix_object(text, i, depth + 1)
            assert inner is not None
            value, i, whole = inner
            out.setdefault(key, value)
            if not whole:
                return out, i, False
        else:
            try:
                value, i = _jsontext.raw_decode(text, i, object_pairs_hook=first_wins)
            except (ValueError, RecursionError):
                return out, i, False
            out.setdefault(key, value)
        i = _skip(text, i)
        if text[i:i + 1] == ",":
            i += 1
            continue
        return out, i + 1, text[i:i + 1] == "}"


def first_wins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's members with a repeated key keeping its FIRST value (``json.loads``
    keeps the last). RFC 8259 leaves repeated names to the reader; the per-event shim
    (``supervisor/hook-fast.sh``) decides from the payload's first 4 KiB and drains the rest
    unread (or, for a harness proved to tolerate it, leaves it unread), so the first value is the one both can see: a key repeated after a long
    ``tool_response`` must not change the answer (a shim that scanned the rest for repeats
    would pay for every byte of every Read: docs/benchmarks.md, row "post-tool hook on a
    200 KB Read, nothing to do")."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        out.setdefault(key, value)
    return out


def decode_payload(raw: bytes | None) -> dict[str, Any] | None:
    """Parse ``raw`` as a JSON object; anything else (junk, arrays, strings, empty) is ``None``.
    A repeated key keeps its first value, at every level (:func:`first_wins`)."""
    if not raw:
        return None
    try:
        value = _jsontext.loads(raw.decode("utf-8"), object_pairs_hook=first_wins)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def parse_payload(data: dict[str, Any] | None, harness: str = "") -> Payload | None:
    """Validate a decoded payload into :class:`HookPayload` or, for Cursor, :class:`CursorPayload`.

    Cursor is chosen by ``harness == "cursor"``; only when the harness is unknown (``""``)
    does an object with ``workspace_roots`` and no ``source`` count as Cursor's. Another
    harness's payload that happens to carry ``workspace_roots`` keeps its ``cwd`` (the
    per-event shim reads ``cwd`` too: both look at the same project). Returns ``None`` for
    ``None``. Cline's (``taskId``, ``sessionContext.rootSessionId``, ``workspaceRoots``,
    ``hookName``) is read as Cursor's: the session is ``rootSessionId`` (else the task), its
    first workspace root the project. A task resumed with ``cline --id SESSION`` gets a new
    ``taskId`` under the same ``rootSessionId`` (LAB 3.0.65), so the resume is the same
    session of ours.
    """
    if data is None:
        return None
    if harness == "cline":  # Cline CLI 3.0.65: taskId, workspaceRoots (camelCase), no cwd
        roots = data.get("workspaceRoots")
        ctx = data.get("sessionContext")
        root = ctx.get("rootSessionId") if isinstance(ctx, dict) else None
        session = root if isinstance(root, str) and root.strip() else data.get("taskId")
        data = {"conversation_id": session, "hook_event_name": data.get("hookName"),
                "workspace_roots": [r for r in roots if isinstance(r, str)]
                if isinstance(roots, list) else []}
        return load_record(CursorPayload, data, tolerant=True, extra="extra")
    if harness == "cursor" or (not harness and "workspace_roots" in data
                               and "source" not in data):
        roots = data.get("workspace_roots")
        if isinstance(roots, list):
            data = {**data, "workspace_roots": [r for r in roots if isinstance(r, str)]}
        return load_record(CursorPayload, data, tolerant=True, extra="extra")
    return load_record(HookPayload, data, tolerant=True, extra="extra")


def read_payload(harness: str = "", fd: int = 0) -> Payload | None:
    """Bounded read of stdin, decode and validate; ``None`` means "no payload"."""
    return parse_payload(read_payload_data(fd), harness)


def recognize_source(value: object) -> str:
    """``value`` if it is exactly one of :data:`SOURCES`, else ``""`` (unrecognized)."""
    return value if isinstance(value, str) and value in SOURCES else ""


def payload_source(payload: Payload | None) -> str:
    """The recognized source from the payload's top-level ``source`` key, or ``""``."""
    if isinstance(payload, HookPayload):
        return recognize_source(payload.source)
    return ""


MAX_SESSION_ID = 256
"""Characters of a session id we keep (real ids are UUIDs; a huge one must not overflow the
environment of every stage or the lock record)."""


def clean_session_id(value: str) -> str:
    """``value`` made safe to carry in an environment variable and a JSON record: control
    characters (NUL included) and lone surrogates removed, at most :data:`MAX_SESSION_ID`
    characters. Comparisons always use the cleaned form."""
    value = value.encode("utf-8", "replace").decode("utf-8")
    value = "".join(ch for ch in value if ch.isprintable())
    return value[:MAX_SESSION_ID]


def payload_session_id(payload: Payload | None) -> str:
    """The harness session id (cleaned, :func:`clean_session_id`; display only, never a path
    part), or ``""``."""
    if isinstance(payload, HookPayload):
        return clean_session_id(payload.session_id or "")
    if isinstance(payload, CursorPayload):
        return clean_session_id(payload.session_id or payload.conversation_id or "")
    return ""


def project_dir(payload: Payload | None, env: dict[str, str] | None = None,
                cwd: StrPath | None = None) -> str:
    """The project directory the harness runs in, resolved to its git top level.

    Order: payload ``cwd``, Cursor ``workspace_roots[0]``, ``CLAUDE_PROJECT_DIR``,
    ``CURSOR_PROJECT_DIR``, ``GEMINI_PROJECT_DIR``, then ``cwd`` (default: the current
    directory). A candidate that is not an existing absolute directory is skipped.
    """
    return session_place(payload, env, cwd)[0]


def session_place(payload: Payload | None, env: dict[str, str] | None = None,
                  cwd: StrPath | None = None) -> tuple[str, str]:
    """``(project root, session working directory)`` for a hook payload.

    The working directory is the first usable candidate of :func:`project_dir` (payload
    ``cwd`` for Claude, Codex, Gemini, Qwen and Grok; ``workspace_roots[0]`` for Cursor; then
    the project-dir variables; then ``cwd``, default the current directory), symlinks resolved
    like the project root; the project root is its git top level. Both are ``str``. It becomes ``SUPERVISE_CWD``, so a
    session started in ``<project>/pkg`` gets ``pkg``'s instructions (issue 12, item 1).
    """
    env = dict(os.environ) if env is None else env
    candidates: list[str] = []
    if isinstance(payload, HookPayload) and payload.cwd:
        candidates.append(payload.cwd)
    if isinstance(payload, CursorPayload) and payload.workspace_roots:
        candidates.append(payload.workspace_roots[0])
    candidates += [env[name] for name in PROJECT_DIR_ENV if env.get(name)]
    for raw in candidates:
        try:
            usable = os.path.isabs(raw) and os.path.isdir(raw)
        except (OSError, ValueError):  # NUL bytes, over-long names: not a directory
            usable = False
        if usable:
            return find_project_root(raw), os.path.realpath(raw)
    start = os.path.abspath(cwd if cwd is not None else os.getcwd())
    return find_project_root(start), os.path.realpath(start)
