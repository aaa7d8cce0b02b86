"""The validated digest as the engine runs it: frozen records (:mod:`supervisor._record`), no pydantic.

``supervise.toml`` is validated once by the pydantic models of :mod:`supervisor.config._schema`; the
result is a :class:`DigestPlan`, which :mod:`supervisor.config._plancache` caches as JSON so that a
hook run whose config did not change never imports pydantic. This module holds the plan's
shape, its limits and the environment overrides (``SUPERVISE_TIMEOUT``, ``SUPERVISE_GRACE``);
it imports neither the config models nor the cache (data flows config -> plan, never back).
"""

from __future__ import annotations

import os

from .._errors import ConfigError
from .._harnesses import names
from .._record import asdict, field, fields, record, replace
from ._limits import MAX_GRACE as MAX_GRACE
from ._limits import MAX_SECONDS as MAX_SECONDS

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from collections.abc import Callable

    from _typeshed import StrPath
    from typing import Any, Literal

DEFAULT_MAX_TASKS = 512
"""Processes a stage's tree may hold at once (``max_tasks``); a fork bomb stops here."""
MAX_TASKS_LIMIT = 4_194_304
"""Largest ``max_tasks`` accepted (the kernel's own pid limit)."""
MIN_MEMORY = 1 << 20
"""Smallest ``max_memory`` accepted, in bytes (1 MiB: less cannot start an interpreter)."""
MAX_MEMORY_LIMIT = 1 << 50
"""Largest ``max_memory`` accepted, in bytes (1 PiB)."""

CONFIG_FILE = "supervise.toml"


@record
class StagePlan:
    """One stage, validated (field meanings: docs/stage-authors.md, "Config keys").

    The one declaration of a stage's fields, their types and defaults: the config model
    :class:`supervisor.config._schema.StageSpec` is made from it (adding only the bounds and
    the checks of each key), so a new stage key is one line here (docs/architecture.md).
    """

    name: str
    run: tuple[str, ...] | None = None
    builtin: str | None = None
    args: tuple[str, ...] = ()
    shell: bool = False
    title: str | None = None
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    timeout: float | None = None
    max_output: int | None = None
    max_tasks: int = DEFAULT_MAX_TASKS
    max_memory: int | None = None
    needs: tuple[str, ...] = ()
    deferred: bool = False
    reemit: bool = False
    exclusive: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    ok_exit: tuple[int, ...] = (0,)
    when: dict[str, tuple[str, ...]] | None = None
    """``{"source": (...), "harness": (...), "paths": (...)}`` (any may be absent): see
    :func:`unmet`."""
    stderr: Literal["context", "log", "drop"] = "log"
    """Where the stage's stderr goes: the stage log (:mod:`supervisor.engine._stagelog`), merged
    into its stdout (``context``), or nowhere (``drop``)."""


WHEN_SOURCES: tuple[str, ...] = ("startup", "new", "clear", "compact", "resume", "reload", "fork")
"""The session sources we recognize, the one list: the values ``when.source`` takes, and
what a payload's ``source`` is matched against (``supervisor.session._payload.SOURCES``)."""
WHEN_HARNESSES: tuple[str, ...] = (*names(), "terminal")
"""Values ``when.harness`` takes: the harness table's names, and ``terminal`` for no harness."""


def unmet(stage: StagePlan, source: str, harness: str,
          where: str | None | Callable[[], str | None] = "") -> str:
    """Why ``stage``'s ``when`` condition excludes a run with this routed ``source``,
    ``harness`` and working directory ``where`` (one clause, e.g. ``when.source is startup,
    clear; this run's is compact``), or ``""`` when it takes part. ``source`` ``""`` (a
    terminal, an unrecognized source) counts as ``startup``; ``harness`` ``""`` as
    ``terminal``. ``where``: the session's working directory relative to the project root,
    POSIX (``""`` the root itself, ``"packages/widget"``), None when it lies outside the
    project (then no ``when.paths`` holds), or a function giving it, called only for a stage
    with ``when.paths`` (``SessionContext.where``: two ``realpath`` calls); see
    :func:`path_matches`."""
    if not stage.when:
        return ""
    have = {"source": source or "startup", "harness": harness or "terminal"}
    for key in ("source", "harness"):
        allowed = stage.when.get(key)
        if allowed is not None and have[key] not in allowed:
            return f"when.{key} is {', '.join(allowed)}; this run's is {have[key]}"
    paths = stage.when.get("paths")
    if paths is None:
        return ""
    folder = where() if callable(where) else where
    if not (folder is not None and path_matches(paths, folder)):
        shown = "outside the project" if folder is None else (folder or "the project root")
        return f"when.paths is {', '.join(paths)}; this session's directory is {shown}"
    return ""


def path_matches(patterns: tuple[str, ...], where: str) -> bool:
    """True when the folder ``where`` (project-relative, POSIX, ``""`` = root) or one of its
    ancestors matches one of ``patterns`` (:func:`glob_match`): the matching folder or below
    it, like lefthook's ``root`` and pre-commit's ``files`` for a stage. A trailing ``/**``
    or ``/`` is the folder itself and what is below it."""
    parts = where.split("/") if where else []
    folders = ["/".join(parts[:n]) for n in range(len(parts) + 1)]
    for pattern in patterns:
        base = pattern.strip("/").removesuffix("/**")
        if any(glob_match(base, folder) for folder in folders):
            return True
    return False


def glob_match(pattern: str, path: str) -> bool:
    """True when the project-relative POSIX ``path`` matches the glob ``pattern`` as a
    ``.gitignore`` path does: ``*`` and ``?`` stay within one name, ``[abc]``/``[!abc]`` is a
    class, a ``**`` part spans any number of folders (none included). The one home of the
    glob rule of ``when.paths`` and of path-scoped rules (``supervisor.session._rules``).
    Without ``re`` (about 6 ms on a hook's path): name by name."""
    return _parts_match(pattern.split("/") if pattern else [], path.split("/") if path else [])


def _parts_match(pat: list[str], names: list[str]) -> bool:
    if not pat:
        return not names
    if pat[0] == "**":
        return any(_parts_match(pat[1:], names[i:]) for i in range(len(names) + 1))
    return bool(names) and _name_match(pat[0], names[0]) and _parts_match(pat[1:], names[1:])


def _name_match(pat: str, name: str) -> bool:
    """One name against one glob part (``*``, ``**`` inside a name as ``*``, ``?``, classes)."""
    if not pat:
        return not name
    head = pat[0]
    if head == "*":
        rest = pat.lstrip("*")
        return any(_name_match(rest, name[i:]) for i in range(len(name) + 1))
    if not name:
        return False
    if head == "?":
        return _name_match(pat[1:], name[1:])
    if head == "[" and "]" in pat[2:]:
        end = pat.index("]", 2)
        body, negate = pat[1:end], False
        if body[:1] == "!":
            body, negate = body[1:], True
        hit = any(a <= name[0] <= b for a, b in _ranges(body)) != negate
        return hit and _name_match(pat[end + 1:], name[1:])
    return head == name[0] and _name_match(pat[1:], name[1:])


def _ranges(body: str) -> list[tuple[str, str]]:
    out, i = [], 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            out.append((body[i], body[i + 2]))
            i += 3
        else:
            out.append((body[i], body[i]))
            i += 1
    return out


DEFAULT_MAX_PARALLEL = 64
"""Stages running at once by default (``max_parallel``; 0 = no limit). Each running stage holds
a pipe and a process group: 64 keeps a digest far below the usual 1,024 open-file limit, and
no digest of fewer stages waits at all (docs/benchmarks.md, rows "500 stages of `sleep 0.2`"
and "digest of 10 x `sleep 0.2`")."""


DEFAULT_BUDGET = 120.0
"""Overall digest budget in seconds (``budget``; ``SUPERVISE_TIMEOUT`` overrides)."""
DEFAULT_GRACE = 1.0
"""Seconds between SIGTERM and SIGKILL (``grace``; ``SUPERVISE_GRACE`` overrides)."""
DEFAULT_MAX_OUTPUT = 1024 * 1024
"""Total bytes a digest may print before its output is cut with a marker."""


@record
class DigestPlan:
    """A whole digest, validated: ``budget``/``grace`` in seconds, caps in bytes.

    The one declaration of the top-level config keys, their types and defaults: the config
    model :class:`supervisor.config._schema.DigestConfig` is made from it (adding the bounds,
    the checks and ``stages_from``), as ``StageSpec`` is from :class:`StagePlan`.
    """

    budget: float = DEFAULT_BUDGET
    grace: float = DEFAULT_GRACE
    max_output: int = DEFAULT_MAX_OUTPUT
    reemit_budget: int = 24 * 1024
    max_parallel: int = DEFAULT_MAX_PARALLEL
    scope: Literal["primary", "any"] = "primary"
    gate_env: tuple[str, ...] = ("NO_MISTAKES_GATE",)
    gate_common_dirs: tuple[str, ...] = ("*/.no-mistakes/repos/*.git",)
    inline_cap: dict[str, int] = field(default_factory=dict)
    stages: tuple[StagePlan, ...] = ()
    source: str = "<embedded default>"

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> DigestPlan:
        """Build from an already-validated mapping (``model_dump()`` or the cache)."""
        known = set(fields(cls))
        stage_known = set(fields(StagePlan))
        top = {k: v for k, v in data.items() if k in known and k != "stages"}
        for key in ("gate_env", "gate_common_dirs"):
            if key in top:
                top[key] = tuple(top[key])
        stages = []
        for raw in data.get("stages", ()):
            item = {k: v for k, v in raw.items() if k in stage_known}
            for key in ("run", "args", "needs", "ok_exit"):
                if item.get(key) is not None:
                    item[key] = tuple(item[key])
            if item.get("when") is not None:
                item["when"] = {k: tuple(v) for k, v in item["when"].items() if v is not None}
            stages.append(StagePlan(**item))
        return cls(**top, stages=tuple(stages))

    def to_mapping(self) -> dict[str, Any]:
        """A JSON-ready mapping (inverse of :meth:`from_mapping`)."""
        return asdict(self)

    def stage(self, name: str) -> StagePlan:
        """The stage called ``name``. Raises KeyError when there is none."""
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(name)


MAX_CONFIG_BYTES = 1024 * 1024
"""Bytes read of a config file (``supervise.toml``, ``pyproject.toml``, ``--config``): a larger
file is a config error, never read whole (a planted 3 GiB file cost the hook its deadline)."""


def read_config_bytes(path: StrPath, *, special_ok: bool = False) -> bytes:
    """The bytes of config file ``path``, at most :data:`MAX_CONFIG_BYTES`, never blocking on a
    planted FIFO: opened with ``O_NONBLOCK`` and ``fstat``-ed; only a regular file is read
    (``special_ok``: also a pipe, for ``--config <(...)``, which the user named themselves).

    Raises:
        ConfigError: one line naming the file and the true reason: not a regular file (a FIFO,
            socket, device or folder), too large (its size), or cannot be read (the OS error).
    """
    from ..state._fsutil import read_small_file

    data = read_small_file(path, MAX_CONFIG_BYTES, what="a config file", special_ok=special_ok)
    assert data is not None  # missing_ok is False: a missing file raised
    return data


def find_config(project_dir: StrPath) -> str | None:
    """Return the file that configures ``project_dir``, or None for the embedded default.

    ``supervise.toml`` wins whenever it exists, even as a FIFO, folder or dangling link (the
    load then names why it cannot be used rather than silently running the default); else
    ``pyproject.toml`` when it is a regular file with a ``[tool.supervise]`` table in its first
    :data:`MAX_CONFIG_BYTES` bytes (a pyproject that cannot be read is not ours to judge).
    """
    candidate = os.path.join(project_dir, CONFIG_FILE)
    if os.path.lexists(candidate):
        return candidate
    pyproject = os.path.join(project_dir, "pyproject.toml")
    try:
        fd = os.open(pyproject, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        head = os.read(fd, MAX_CONFIG_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return pyproject if b"[tool.supervise" in head else None


def _env_seconds(name: str, positive: bool) -> float | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    want = ("a number of seconds greater than 0" if positive
            else "a number of seconds, 0 or more")
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (value > 0 if positive else value >= 0) or value == float("inf"):
        raise ConfigError(f"environment: {name}={raw!r}: expected {want}")
    limit = MAX_GRACE if name == "SUPERVISE_GRACE" else MAX_SECONDS
    if value > limit:
        raise ConfigError(f"environment: {name}={raw!r}: expected at most {limit:g} seconds")
    return value


def env_overrides() -> dict[str, float]:
    """``{"budget": ..., "grace": ...}`` from ``SUPERVISE_TIMEOUT`` / ``SUPERVISE_GRACE``
    (seconds), only for the variables that are set.

    Raises:
        ConfigError: a variable is set to something that is not a non-negative number (or a
            zero budget).
    """
    update: dict[str, float] = {}
    budget = _env_seconds("SUPERVISE_TIMEOUT", positive=True)
    if budget is not None:
        update["budget"] = budget
    grace = _env_seconds("SUPERVISE_GRACE", positive=False)
    if grace is not None:
        update["grace"] = grace
    return update


def apply_env_overrides(plan: DigestPlan) -> DigestPlan:
    """``plan`` with :func:`env_overrides` applied. Raises ConfigError like it."""
    update = env_overrides()
    return replace(plan, **update) if update else plan


def as_plan(config: Any) -> DigestPlan:
    """``config`` as a :class:`DigestPlan`: a plan is returned as is; a pydantic
    :class:`~supervisor.config._schema.DigestConfig` is converted (no new imports either way)."""
    if isinstance(config, DigestPlan):
        return config
    return DigestPlan.from_mapping({**config.model_dump(mode="json"), "source": config.source})
