"""Shared plumbing of the built-in memory stages (``memory``, ``summary``): stdlib only.

Environment, options, the stage log, UTF-8 cuts, the refusal rules for planted memory
(symlinks, symlinked directories, files tracked by the project's git) and exposure events.
Every function here is total: it reports a problem through its return value or the log,
never by raising, because a stage must exit 0 whatever goes wrong (brief, memory.md #20).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date as _date
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from supervisor.state._intake import Got, Refused

GIT_TIMEOUT = 5.0
"""Seconds the ``git ls-files`` refusal check may take before it is abandoned (fail closed)."""

LOG_MAX_BYTES = 1024 * 1024
"""Bytes a stage log may reach before it is rotated to ``<stage>.log.1``."""
LOG_LINE_BYTES = 8 * 1024
"""Bytes one log line may take (a longer one is cut)."""

@dataclass(frozen=True)
class StageEnv:
    """What the engine tells a stage (``SUPERVISE_*``), read once.

    Attributes:
        source: the routed source; ``""`` when unrecognized or run from a terminal.
        project_dir: absolute project root (cwd when unset).
        state_dir: absolute per-machine state dir, or None when unset (nothing is written).
        session: the harness session id, display only.
        stage: this stage's name.
        options: the stage's ``options`` table (``{}`` when absent or not a JSON object).
        preview: ``SUPERVISE_PREVIEW=1``, a person looking: nothing is recorded (no
            delivery counted, no exposure, no consolidation started).
    """

    source: str
    project_dir: Path
    state_dir: Path | None
    session: str
    stage: str
    options: dict[str, Any]
    preview: bool = False

    @property
    def compact(self) -> bool:
        """True only for the exact routed source ``compact`` (memory.md #1)."""
        return self.source == "compact"


def read_env(default_stage: str) -> tuple[StageEnv, list[str]]:
    """Read the stage environment. Returns ``(env, problems)``; problems are log lines."""
    problems: list[str] = []
    raw = os.environ.get("SUPERVISE_STAGE_OPTIONS", "") or "{}"
    try:
        options = json.loads(raw)
    except ValueError:
        options = None
    if not isinstance(options, dict):
        problems.append(f"SUPERVISE_STAGE_OPTIONS is not a JSON object ({raw[:80]!r}); defaults used")
        options = {}
    project = os.environ.get("SUPERVISE_PROJECT_DIR") or os.getcwd()
    state = os.environ.get("SUPERVISE_STATE_DIR") or ""
    env = StageEnv(
        source=os.environ.get("SUPERVISE_SOURCE", ""),
        project_dir=Path(project).absolute(),
        state_dir=Path(state).absolute() if state else None,
        session=os.environ.get("SUPERVISE_SESSION_ID", ""),
        stage=os.environ.get("SUPERVISE_STAGE_NAME", "") or default_stage,
        options=options,
        preview=os.environ.get("SUPERVISE_PREVIEW", "") == "1",
    )
    return env, problems


class Options:
    """Typed access to a stage's options; a malformed value falls back to its default and is
    remembered in :attr:`problems` (logged by the caller, never fatal)."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self._raw = raw
        self.problems: list[str] = []

    def _bad(self, key: str, value: object, expected: str, default: object) -> None:
        self.problems.append(f"option {key}={value!r}: expected {expected}; using {default!r}")

    def whole(self, key: str, default: int, *, minimum: int = 0) -> int:
        """A whole number >= ``minimum`` (bools and floats with a fraction are malformed)."""
        value = self._raw.get(key, default)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self._bad(key, value, f"a whole number >= {minimum}", default)
            return default
        return value

    def seconds(self, key: str, default: float) -> float:
        """A positive number (seconds)."""
        value = self._raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            self._bad(key, value, "a number > 0", default)
            return default
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        """A TOML boolean."""
        value = self._raw.get(key, default)
        if not isinstance(value, bool):
            self._bad(key, value, "true or false", default)
            return default
        return value

    def text(self, key: str, default: str) -> str:
        """A non-empty string."""
        value = self._raw.get(key, default)
        if not isinstance(value, str) or not value.strip():
            self._bad(key, value, "a non-empty string", default)
            return default
        return value

    def date(self, key: str) -> _date | None:
        """An ISO date (``YYYY-MM-DD``), or None when unset or malformed."""
        value = self._raw.get(key)
        if value is None:
            return None
        try:
            return _date.fromisoformat(str(value))
        except ValueError:
            self._bad(key, value, "an ISO date YYYY-MM-DD", "the local date")
            return None

    def argv(self, key: str) -> list[str] | None:
        """An argv: a list of strings, or a string split like a POSIX shell would; None if unset."""
        value = self._raw.get(key)
        if value is None:
            return None
        if isinstance(value, str):
            import shlex

            try:
                value = shlex.split(value)
            except ValueError:
                value = None
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            self._bad(key, self._raw.get(key), "a command (list of strings or a string)", None)
            return None
        return value


def resolve_path(project_dir: Path, value: str) -> Path:
    """``value`` as an absolute path: ``~`` expanded, relative to the project dir. Not resolved
    (symlinks are kept visible so that they can be refused)."""
    from _common import expand_home

    path = Path(expand_home(value))  # "~nouser" stays as written (Path's raises); no home: absent
    return path if path.is_absolute() else project_dir / path


def log(env: StageEnv, line: str) -> None:
    """Append one timestamped line to ``<state>/logs/<stage>.log`` (rotated past
    :data:`LOG_MAX_BYTES`) through the state door; silent when impossible (a symlinked state
    dir included: nothing is written through it)."""
    if env.state_dir is None:
        return
    from supervisor._errors import StateError
    from supervisor.state._statedir import open_subpath

    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    text = f"{stamp} [{env.stage}] {' '.join(line.split())}\n"
    try:  # through the state door: never through a planted link, FIFO or folder
        folder = open_subpath(env.state_dir, ("logs",), create=True)
        if folder is not None:
            with folder:
                folder.append(f"{env.stage}.log", text.encode("utf-8", "replace")[:LOG_LINE_BYTES],
                              max_bytes=LOG_MAX_BYTES)
    except (StateError, OSError):
        pass


def cut_utf8(data: bytes, limit: int) -> bytes:
    """The longest prefix of ``data`` of at most ``limit`` bytes that ends on a UTF-8 boundary."""
    if len(data) <= limit:
        return data
    cut = max(limit, 0)
    while cut > 0 and (data[cut] & 0xC0) == 0x80:
        cut -= 1
    return data[:cut]


def decode(data: bytes) -> str:
    """Bytes of a memory file as text; invalid UTF-8 becomes U+FFFD (memory.md #18)."""
    return data.decode("utf-8", "replace")


def decode_clean(data: bytes, source: Path) -> tuple[str, str]:
    """``(text, note)``: :func:`decode`, then hidden text removed (escape sequences, controls,
    bidi and invisible characters; :func:`supervisor._sanitize.clean`, issue 11 item 8);
    ``note`` is ``[supervise] N hidden characters removed from PATH`` or ``""``."""
    from supervisor._sanitize import clean, removed_note

    text, removed = clean(decode(data))
    return text, removed_note(removed, str(source))


def read_memory(path: Path, limit: int) -> Got | Refused:
    """The first ``limit`` bytes of memory file ``path`` through the one door
    (:func:`supervisor.state._intake.read`, ``follow=False``: a link is refused, never
    followed; a FIFO or device never read; ``/proc``, ``/sys``, ``/dev`` never opened), as a
    :class:`supervisor.state._intake.Got` (``data``, ``size``), or the door's
    :class:`~supervisor.state._intake.Refused` (``reason``) when it cannot be read.
    The store may lie anywhere the config puts it (``dir``); the refusals of planted memory
    (links on the way, files the project's git tracks) are the callers'."""
    from supervisor.state._intake import Scope, read

    return read(path, Scope((), anywhere=True), cap=limit, follow=False, whole=False)


def emit(text: str) -> None:
    """Write the stage output as UTF-8 whatever the locale (memory.md #18)."""
    try:
        sys.stdout.buffer.write(text.encode("utf-8", "replace"))
        sys.stdout.flush()
    except (BrokenPipeError, OSError):
        pass


def symlink_in(path: Path, anchor: Path | None) -> Path | None:
    """The first symlink among ``path`` and its parents strictly below ``anchor``, else None.

    Parents at or above ``anchor`` are not checked: a project reached through a symlink (macOS
    ``/tmp``) is not planted memory. With ``anchor`` None only ``path`` itself is checked.
    """
    chain = [path]
    if anchor is not None:
        parent = path.parent
        while parent != anchor and anchor in parent.parents:
            chain.append(parent)
            parent = parent.parent
    for item in chain:
        try:
            if item.is_symlink():
                return item
        except OSError:
            continue
    return None


def anchor_for(project_dir: Path, path: Path) -> Path | None:
    """The project dir when ``path`` lies inside it, else None."""
    return project_dir if project_dir in path.parents else None


def git_tracked(project_dir: Path, paths: list[Path]) -> tuple[set[Path], str | None]:
    """Which of ``paths`` (inside ``project_dir``) the project's git tracks.

    Returns ``(tracked, problem)``. Not a git repo or no git installed: nothing is tracked. A
    git that fails or hangs past :data:`GIT_TIMEOUT` seconds fails closed: every path counts
    as tracked, and ``problem`` says why.
    """
    inside = [p for p in paths if project_dir in p.parents]
    if not inside:
        return set(), None
    from _common import clean_git_env  # stages/ is on sys.path wherever ``memory`` imports

    env = clean_git_env()
    rels = [str(p.relative_to(project_dir)) for p in inside]
    try:
        proc = subprocess.run(
            ["git", "-C", str(project_dir), "ls-files", "-z", "--", *rels],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=GIT_TIMEOUT, env=env,
        )
    except FileNotFoundError:
        return set(), None
    except (OSError, subprocess.TimeoutExpired) as err:
        return set(inside), f"git ls-files failed ({err}); refusing memory files inside the project"
    if proc.returncode != 0:
        from supervisor._git import failure

        why = failure("git ls-files", proc.returncode, proc.stderr)
        if why is None:  # not a git repository: nothing is tracked
            return set(), None
        return set(inside), f"{why}; memory files inside the project are refused until it works"
    # Paths come back relative to the cwd given with -C, which is the project dir.
    listed = {project_dir / Path(os.fsdecode(p)) for p in proc.stdout.split(b"\0") if p}
    return {p for p in inside if p in listed}, None


def record_exposure(env: StageEnv, what: Path | str, nbytes: int) -> None:
    """Append a resident-exposure event for ``what`` (see ``supervisor.state._exposure``); best effort."""
    if env.state_dir is None or nbytes <= 0 or env.preview:
        return  # a preview reached no model
    from supervisor.state import _exposure

    try:
        _exposure.append_exposure(env.state_dir, what=str(what), nbytes=nbytes,
                                  source=env.source, session=env.session, stage=env.stage)
    except OSError as err:
        log(env, f"cannot record exposure: {err}")


def run_stage_main(main: Callable[[], int], stage: str) -> None:
    """``sys.exit(main())``, but an internal failure is one line on stderr and in the stage
    log, and the exit status is 0: a stage never fails the digest (memory.md #20)."""
    try:
        sys.exit(main())
    except Exception as err:  # noqa: BLE001 - stated, logged, never fatal
        line = f"{stage} stage: internal error: {type(err).__name__}: {err}"
        print(line, file=sys.stderr)
        log(read_env(stage)[0], line)
        sys.exit(0)
