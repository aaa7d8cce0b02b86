"""Stage stderr kept apart from the model's context (``stderr = "log"``, the default).

A stage's stdout is what the model reads; its stderr (warnings, tracebacks, progress bars) is
for the user. With ``stderr = "log"`` the engine reads stderr on its own pipe into a
:class:`StderrCapture` (bounded: the last :data:`LOG_BYTES` bytes are kept) and, when the
stage ends, appends one entry to ``<state>/logs/<stage>.log``: a header line naming the run
and the stage's status, then the stderr bytes. Past :data:`LOG_BYTES` the log is rotated to
``<stage>.log.1`` (one old generation), so a stage's logs never exceed twice that.

``<stage>.count.json`` (``{"lines": N, "seen": M}``) counts the stderr lines ever logged and
how many ``supervise status`` had shown when it last ran, so status can say "3 new lines since
the last view". Every file goes through the state-dir door (:mod:`supervisor.state._statedir`):
no link followed, no FIFO read, every read capped.
"""

from __future__ import annotations

import time
from pathlib import Path

from .._record import field, mutable_record

TYPE_CHECKING = False  # not typing's: a session start runs this module
if TYPE_CHECKING:
    from typing import Any

LOG_DIR = "logs"
"""The folder in the state dir that holds the stage logs."""
LOG_BYTES = 64 * 1024
"""Bytes a stage's log may reach before it is rotated (one generation kept: ``.log.1``)."""
TAIL_LINES = 5
"""Lines of each log ``supervise status`` shows."""
TAIL_LINE_CHARS = 300
"""Characters of each shown log line; a longer line is cut and says how much was left out
(a stage that writes megabytes of stderr without a newline must not flood the terminal)."""
_COUNT_CAP = 4096


def _printable(text: str) -> str:
    """``text`` without control characters (escape sequences from an untrusted stage must not
    reach a terminal or the model: removed whole, parameters included, by
    :func:`supervisor._sanitize.clean`); tabs become spaces."""
    from .._sanitize import clean

    text = clean(text)[0]
    return "".join(c if c.isprintable() else (" " if c == "\t" else "") for c in text)


def _bounded(line: str, limit: int = TAIL_LINE_CHARS) -> str:
    """``line`` cut to ``limit`` characters plus a marker naming how many were left out."""
    if len(line) <= limit:
        return line
    return f"{line[:limit]} [... {len(line) - limit} more characters cut]"


@mutable_record
class StderrCapture:
    """A stage's stderr as read so far: the last :data:`LOG_BYTES` bytes and how many bytes
    before them were dropped (bytes)."""

    data: bytearray = field(default_factory=bytearray)
    dropped: int = 0

    def feed(self, chunk: bytes) -> None:
        """Add ``chunk``; keeps memory bounded by trimming the oldest bytes."""
        self.data += chunk
        extra = len(self.data) - LOG_BYTES
        if extra > LOG_BYTES:  # trim in large steps, not on every chunk
            del self.data[:extra]
            self.dropped += extra

    def body(self) -> bytes:
        """The bytes to log: at most :data:`LOG_BYTES`, ending in a newline when not empty."""
        extra = max(len(self.data) - LOG_BYTES + 128, 0)
        data = bytes(self.data[extra:])
        if extra or self.dropped:
            data = (f"[... {extra + self.dropped} earlier bytes of stderr dropped]\n".encode()
                    + data)
        return data if not data or data.endswith(b"\n") else data + b"\n"

    def lines(self) -> int:
        """Lines read (a final line without a newline counts), including dropped ones only as
        far as they are kept."""
        if not self.data:
            return 0
        return self.data.count(b"\n") + (0 if self.data.endswith(b"\n") else 1)

    def last_line(self, limit: int = 200) -> str:
        """The last non-empty line, printable characters only, at most ``limit`` characters."""
        for raw in reversed(bytes(self.data[-4096:]).splitlines()):
            text = _printable(raw.decode("utf-8", "replace")).strip()
            if text:
                return text if len(text) <= limit else text[: limit - 1] + "\u2026"
        return ""


def log_path(state_dir: Path, stage: str) -> Path:
    """Where stage ``stage``'s stderr log is (for messages; reading goes through the door)."""
    return state_dir / LOG_DIR / f"{stage}.log"


def write_entry(state_dir: Path, stage: str, header: str, capture: StderrCapture) -> None:
    """Append one run's stderr (``capture``) to ``stage``'s log under ``header`` (one line,
    without newline) and add its lines to the count. Nothing is written for an empty capture.

    Raises:
        StateError: the state dir or its ``logs/`` folder cannot be used (a link, disk full).
    """
    if not capture.data:
        return
    from ..state._statedir import StateDir

    entry = f"--- {_printable(header)} ---\n".encode() + capture.body()
    with StateDir.open(state_dir, create=True) as sd:
        logs = sd.sub(LOG_DIR, create=True)
        if logs is None:  # not with create=True (a folder, or StateError); for the types
            return
        with logs:
            logs.append(f"{stage}.log", entry, max_bytes=LOG_BYTES, keep=1)
            with logs.flock(".count.flock", timeout=2.0):
                count = _read_count(logs, stage)
                count["lines"] += capture.lines()
                logs.write_json(f"{stage}.count.json", count)


def _read_count(logs: Any, stage: str) -> dict[str, int]:
    def check(value: Any) -> dict[str, int]:
        if not (isinstance(value, dict) and all(isinstance(value.get(k), int)
                                                for k in ("lines", "seen"))):
            raise ValueError("not a count")
        return {"lines": max(value["lines"], 0), "seen": max(value["seen"], 0)}

    found = logs.read_json(f"{stage}.count.json", cap=_COUNT_CAP, check=check)
    return found if isinstance(found, dict) else {"lines": 0, "seen": 0}


def read_logs(state_dir: Path, *, mark_seen: bool) -> list[dict[str, Any]]:
    """Every stage log in the state dir, by stage name: ``{"stage", "path", "lines" (ever
    logged), "new" (since the last view), "tail" (the last :data:`TAIL_LINES` lines,
    printable, each cut to :data:`TAIL_LINE_CHARS` characters with a marker)}``. With ``mark_seen`` the count's ``seen`` is moved to ``lines`` (this view
    becomes the last view). An absent state dir or ``logs/`` folder is an empty list.

    Raises:
        StateError: the state dir cannot be used (a symlinked state dir, for instance).
    """
    from ..state._statedir import StateDir

    found: list[dict[str, Any]] = []
    sd = StateDir.open_existing(state_dir)
    if sd is None:
        return found
    with sd:
        logs = sd.sub(LOG_DIR)
        if logs is None:
            return found
        with logs:
            for name in logs.names("*.log"):
                stage = name.removesuffix(".log")
                raw = logs.read(name, cap=LOG_BYTES * 2) or b""
                tail = [_bounded(_printable(line)) for line in
                        raw.decode("utf-8", "replace").splitlines()[-TAIL_LINES:]]
                with logs.flock(".count.flock", timeout=2.0):
                    count = _read_count(logs, stage)
                    if mark_seen and count["seen"] != count["lines"]:
                        logs.write_json(f"{stage}.count.json", {**count, "seen": count["lines"]})
                found.append({"stage": stage, "path": str(log_path(state_dir, stage)),
                              "lines": count["lines"],
                              "new": max(count["lines"] - count["seen"], 0), "tail": tail})
    return found


def header(context: Any, status: str) -> str:
    """The header of one log entry: time (UTC), mode, source, harness and the stage's status."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    return (f"{stamp} {context.mode} digest, source {context.source or '-'}, harness "
            f"{context.harness or 'terminal'}: {status}")
