"""Digest configuration: ``supervise.toml``, ``[tool.supervise]`` or the embedded default.

The file is parsed with :mod:`tomllib` and validated by frozen pydantic models that reject
unknown keys, so a typo is an error naming the file and the key, never a silent default.
"""

from __future__ import annotations

import shlex
import tomllib
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast, get_type_hints

from pydantic import (BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator,
                      model_validator)

from .._errors import ConfigError
from .._record import NO_DEFAULT, Factory, fields
from ._plan import DEFAULT_BUDGET as DEFAULT_BUDGET  # re-exported: install's default timeout
from ._plan import (MAX_GRACE, MAX_MEMORY_LIMIT, MAX_SECONDS, MAX_TASKS_LIMIT, MIN_MEMORY,
                    DigestPlan, StagePlan, find_config, read_config_bytes)

if TYPE_CHECKING:
    from _typeshed import StrPath




class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=False)


MIN_INLINE_CAP = 1000
"""Smallest ``inline_cap`` accepted (characters): room for the line naming the saved digest."""


def _reject_bool(value: object) -> object:
    """A numeric key's raw value, unless it is (or holds) a TOML boolean.

    Pydantic's lax mode reads ``true`` as 1, so ``budget = true`` would become one second and
    ``ok_exit = [true]`` would make status 0 a failure; a boolean is never a number here.

    A quoted number (``budget = "5"``) is refused the same way: TOML has numbers.

    Raises:
        ValueError: ``value`` is a bool or a string, or a list/table holding one.
    """
    items: Any = (value.values() if isinstance(value, dict)
                  else value if isinstance(value, (list, tuple)) else (value,))
    for item in items:
        if isinstance(item, bool):
            raise ValueError(f"must be a number, not true or false (it is {str(item).lower()})")
        if isinstance(item, str):
            shown = repr(item) if len(repr(item)) <= 60 else repr(item)[:57] + "..."
            raise ValueError(f"must be a number (it is {shown})")
    return value


class StageWhen(_Frozen):
    """A stage's condition (``when = { source = [...], harness = [...] }``): the stage runs
    only when every list given holds the run's value. An absent list matches everything.

    ``source`` takes the routed sources (``startup``, ``new``, ``clear``, ``compact``,
    ``resume``, ``reload``, ``fork``); a terminal digest or an unrecognized source counts as
    ``startup`` (it runs as a full start). ``harness`` takes the harness names
    (``claude``, ``codex``, ``cursor``, ``gemini``, ``qwen``, ``grok``, ``pi``,
    ``opencode``) and ``terminal`` for a run with no harness. Modelled on Claude Code's hook
    ``matcher`` (SessionStart matches on the source), extended to the harness. ``paths``
    takes project-relative folder globs matched against the session's working directory
    (lefthook's ``glob``/``root``, pre-commit's ``files``).
    """

    source: tuple[str, ...] | None = None
    harness: tuple[str, ...] | None = None
    paths: tuple[str, ...] | None = None
    """Globs of project-relative folders (``["packages/widget/**"]``): the stage runs when
    the session's working directory is a matching folder or below it
    (:func:`supervisor.config._plan.path_matches`)."""

    @model_validator(mode="after")
    def _known_values(self) -> StageWhen:
        from ._plan import WHEN_HARNESSES, WHEN_SOURCES

        if self.paths is not None:
            if not self.paths:
                raise ValueError("when.paths is empty, so the stage would never run; list "
                                 "project-relative folders such as \"packages/widget/**\", or "
                                 "drop the key")
            for path in self.paths:
                why = ("is empty" if not path.strip() else
                       "is absolute; write it relative to the project root" if path.startswith("/")
                       else "holds '..'; name a folder inside the project" if ".." in path.split("/")
                       else "holds a backslash; separate folders with '/'" if "\\" in path
                       else "")
                if why:
                    raise ValueError(f"when.paths: {path!r} {why}")
        for key, known in (("source", WHEN_SOURCES), ("harness", WHEN_HARNESSES)):
            values = getattr(self, key)
            if values is None:
                continue
            if not values:
                raise ValueError(f"when.{key} is empty, so the stage would never run; list "
                                 f"values from {', '.join(known)}, or drop the key")
            unknown = [v for v in values if v not in known]
            if unknown:
                raise ValueError(f"when.{key}: {unknown[0]!r} is not one of {', '.join(known)}")
        return self


_STAGE_DOC = """One stage of a digest: a subprocess with its own process group and limits.

    Its fields, their types and defaults are :class:`supervisor.config._plan.StagePlan`'s (the
    one declaration); this model adds the bounds of each key (:data:`STAGE_BOUNDS`), the two
    keys validated as another type (:data:`STAGE_TYPES`) and the checks below.

    Exactly one of ``run`` (an argv; a string is split like a POSIX shell would, and runs
    through ``/bin/sh -c`` only with ``shell = true``) or ``builtin`` (a program from
    ``stages/``) is given. ``timeout`` and ``max_output`` are in seconds and bytes.
    ``options`` is passed to the stage as JSON in ``SUPERVISE_STAGE_OPTIONS``.
    ``when`` (:class:`StageWhen`) limits the runs it takes part in, by source and harness.
    ``stderr`` is where the stage's stderr goes: ``log`` (default: the stage log in the state
    dir, :mod:`supervisor.engine._stagelog`; what the model reads is stdout), ``context`` (merged
    into stdout, as one pipe) or ``drop``.
    ``max_tasks`` (processes in the stage's tree at once, default 512) and ``max_memory``
    (bytes of memory of the whole tree, default none) are caps: a stage over one is killed
    whole (cgroup ``pids.max`` / ``memory.max`` where available, else the watchdog).
    """

STAGE_BOUNDS: dict[str, dict[str, Any]] = {
    "name": {"min_length": 1, "max_length": 64, "pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]*$"},
    "timeout": {"gt": 0, "le": MAX_SECONDS, "allow_inf_nan": False},
    "max_output": {"gt": 0},
    "max_tasks": {"ge": 1, "le": MAX_TASKS_LIMIT},
    "max_memory": {"ge": MIN_MEMORY, "le": MAX_MEMORY_LIMIT},
}
"""The bounds of a stage key (pydantic ``Field`` constraints), by field name."""

class _StageTypes:
    """Stage keys validated as another type than the plan holds: ``run`` a list (a string is
    split first; the plan keeps a tuple), ``when`` a table of its own (:class:`StageWhen`; the
    plan keeps its lists). The one statement of those types: the model is made with them
    (:data:`STAGE_TYPES`) and type checkers read them (:class:`StageSpec`'s first base)."""

    run: list[str] | None
    when: StageWhen | None


STAGE_TYPES: dict[str, Any] = get_type_hints(_StageTypes)
"""``{key: type}`` of :class:`_StageTypes`."""


class _StageChecks(_Frozen):
    """The checks of a stage beyond each key's type and bounds (the base of
    :class:`StageSpec`, whose fields come from :class:`~supervisor.config._plan.StagePlan`)."""

    DEFERRED_BUILTINS: ClassVar[frozenset[str]] = frozenset({"network"})
    """Built-ins that run deferred unless the config says ``deferred = false`` (network checks
    must never hold up a session start)."""

    @field_validator("timeout", "max_output", "max_tasks", "max_memory", "ok_exit", mode="before",
                     check_fields=False)  # the fields are StageSpec's, made from StagePlan
    @classmethod
    def _numbers_not_bool(cls, value: object) -> object:
        return _reject_bool(value)

    @model_validator(mode="before")
    @classmethod
    def _deferred_by_default(cls, data: object) -> object:
        if (isinstance(data, dict) and isinstance(data.get("builtin"), str)
                and data["builtin"] in cls.DEFERRED_BUILTINS and "deferred" not in data):
            # a list or table as builtin is a config error (string_type), not a TypeError here
            return {**data, "deferred": True}
        return data

    @model_validator(mode="before")
    @classmethod
    def _split_run(cls, data: object) -> object:
        if isinstance(data, dict) and isinstance(data.get("run"), str):
            value = data["run"]
            if data.get("shell") is True:
                return {**data, "run": [value]}  # the whole string is the script
            try:
                return {**data, "run": shlex.split(value)}
            except ValueError as err:
                raise ValueError(f"run: cannot split {value!r} like a shell would: {err}") from err
        return data

    @model_validator(mode="after")
    def _one_program(self) -> _StageChecks:
        stage = cast("StageSpec", self)  # its fields are made at import (StagePlan's)
        if (stage.run is None) == (stage.builtin is None):
            raise ValueError("give exactly one of 'run' or 'builtin'")
        if stage.run is not None and not stage.run:
            raise ValueError("'run' is empty")
        if stage.shell and stage.run is not None and len(stage.run) != 1:
            raise ValueError("with shell = true, 'run' is one string (the script)")
        if stage.name in stage.needs:
            raise ValueError(f"stage '{stage.name}' needs itself")
        if stage.builtin is not None:
            from ._builtins import list_builtins

            known = list_builtins()
            if stage.builtin not in known:
                raise ValueError(f"'{stage.builtin}' is not a built-in stage (the built-ins are "
                                 f"{', '.join(known) or 'missing: broken install?'})")
        if not stage.ok_exit:
            raise ValueError("'ok_exit' is empty; list the exit statuses that mean success, "
                             "e.g. [0, 1]")
        if any(not 0 <= code <= 255 for code in stage.ok_exit):
            raise ValueError("'ok_exit' holds exit statuses, numbers from 0 to 255")
        # What execve cannot carry is an error here, not a crash at spawn time.
        texts = [*(stage.run or ()), *stage.args, *(stage.env.values()), stage.cwd or ""]
        if any("\0" in t for t in texts):
            raise ValueError("run, args, env and cwd cannot contain a NUL character")
        bad = [k for k in stage.env if not k or "=" in k or "\0" in k]
        if bad:
            raise ValueError(f"env: {bad[0]!r} is not a valid variable name")
        return self


def _made_fields(plan: type, bounds: dict[str, dict[str, Any]],
                 types: dict[str, Any]) -> dict[str, Any]:
    """A config model's field definitions, made from record ``plan``'s (the one
    declaration): ``{name: (type, Field)}`` in its order, the type its annotation (or
    ``types``'), the default its default (a ``field(default_factory=...)`` stays a factory),
    the constraints ``bounds``'."""
    hints: dict[str, Any] = plan.__annotations__
    made: dict[str, Any] = {}
    defaults: tuple[object, ...] = getattr(plan, "__record_defaults__")
    for name, default in zip(fields(plan), defaults):
        rules = bounds.get(name, {})
        if default is NO_DEFAULT:
            info = Field(**rules)
        elif isinstance(default, Factory):
            info = Field(default_factory=default.make, **rules)
        else:
            info = Field(default=default, **rules)
        made[name] = (types.get(name, hints[name]), info)
    return made


if TYPE_CHECKING:
    # ignore[misc]: the model holds _StageTypes' types where the plan's differ, on purpose
    class StageSpec(_StageTypes, _StageChecks, StagePlan):  # type: ignore[misc]
        """For type checkers: StagePlan's fields, typed as the plan declares them but for
        :class:`_StageTypes`' (the model made below holds the same)."""
else:
    StageSpec = create_model("StageSpec", __base__=_StageChecks, __module__=__name__,
                             __doc__=_STAGE_DOC,
                             **_made_fields(StagePlan, STAGE_BOUNDS, STAGE_TYPES))


CONFIG_BOUNDS: dict[str, dict[str, Any]] = {
    "budget": {"gt": 0, "le": MAX_SECONDS, "allow_inf_nan": False},
    "grace": {"ge": 0, "le": MAX_GRACE, "allow_inf_nan": False},
    "max_output": {"gt": 0},
    "reemit_budget": {"ge": 1024},
    "max_parallel": {"ge": 0},
    "source": {"exclude": True},
}
"""The bounds of a top-level key (pydantic ``Field`` constraints), by field name; ``source``
is set by :func:`parse_config`, never dumped."""

class _DigestTypes:
    """Top-level keys validated as another type than the plan holds: the stages as
    :class:`StageSpec` (the plan holds :class:`~supervisor.config._plan.StagePlan`); the one
    statement, as :class:`_StageTypes` is the stages'."""

    stages: tuple[StageSpec, ...]


CONFIG_TYPES: dict[str, Any] = get_type_hints(_DigestTypes)
"""``{key: type}`` of :class:`_DigestTypes`."""


_DIGEST_DOC = """A whole digest: budget and grace in seconds, the output cap in bytes, the stages in order.

    Its fields, their types and defaults are :class:`supervisor.config._plan.DigestPlan`'s
    (the one declaration); this model adds the bounds (:data:`CONFIG_BOUNDS`), the stages'
    model (:data:`CONFIG_TYPES`), ``stages_from`` and the checks below.

    ``source`` names where it was read from (a file path or ``<embedded default>``);
    ``stages_from`` says where the stages came from (a file without a ``stages`` key gets the
    embedded default stages; ``stages = []`` means none). Both are set by
    :func:`parse_config`, not read from the file.
    """


class _DigestChecks(_Frozen):
    """The checks of a whole digest beyond each key's type and bounds (the base of
    :class:`DigestConfig`, whose fields come from :class:`~supervisor.config._plan.DigestPlan`),
    and the one field of its own, ``stages_from``."""

    stages_from: str = Field(default="", exclude=True)

    @field_validator("budget", "grace", "max_output", "reemit_budget", "max_parallel",
                     "inline_cap", mode="before", check_fields=False)  # DigestPlan's fields
    @classmethod
    def _numbers_not_bool(cls, value: object) -> object:
        return _reject_bool(value)

    @field_validator("inline_cap", mode="after", check_fields=False)
    @classmethod
    def _known_caps(cls, value: dict[str, int]) -> dict[str, int]:
        from ..adapters import ADAPTERS

        for harness, cap in value.items():
            if harness not in ADAPTERS:
                raise ValueError(f"{harness!r} is not a harness (one of {', '.join(ADAPTERS)})")
            if cap < MIN_INLINE_CAP:
                raise ValueError(f"{harness} must be at least {MIN_INLINE_CAP} characters, room "
                                 f"for the line naming the saved digest (it is {cap})")
        return value

    @model_validator(mode="after")
    def _check_stages(self) -> _DigestChecks:
        config = cast("DigestConfig", self)  # its fields are made at import (DigestPlan's)
        first: dict[str, int] = {}
        for number, stage in enumerate(config.stages, 1):
            if stage.name in first:
                raise ValueError(f"stages number {first[stage.name]} and {number} are both "
                                 f"named '{stage.name}'; stage names must be unique")
            first[stage.name] = number
        for stage in config.stages:
            for need in stage.needs:
                if need not in first:
                    raise ValueError(f"stage '{stage.name}' needs '{need}', but no stage has "
                                     "that name")
        _check_acyclic(config.stages)
        return self


if TYPE_CHECKING:
    # ignore[misc]: the model holds _DigestTypes' types where the plan's differ, on purpose
    class DigestConfig(_DigestTypes, _DigestChecks, DigestPlan):  # type: ignore[misc]
        """For type checkers: DigestPlan's fields, typed as the plan declares them but for
        :class:`_DigestTypes`' (the model made below holds the same)."""
else:
    DigestConfig = create_model("DigestConfig", __base__=_DigestChecks, __module__=__name__,
                                __doc__=_DIGEST_DOC,
                                **_made_fields(DigestPlan, CONFIG_BOUNDS, CONFIG_TYPES))


def _check_acyclic(stages: tuple[StageSpec, ...]) -> None:
    needs: dict[str, tuple[str, ...]] = {s.name: s.needs for s in stages}
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            raise ValueError("stages need each other in a cycle: " + " -> ".join((*path, name)))
        if name in done:
            return
        for need in needs[name]:
            visit(need, (*path, name))
        done.add(name)

    for name in needs:
        visit(name, ())


_PLAIN: dict[str, str] = {
    "missing": "is required",
    "string_too_short": "must not be empty",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "int_parsing_size": "is too large for a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "string_type": "must be a string (in quotes)",
    "list_type": "must be a list, e.g. [\"a\", \"b\"]",
    "tuple_type": "must be a list, e.g. [\"a\", \"b\"]",
    "dict_type": "must be a table, e.g. { key = \"value\" }",
    "model_type": "must be a table",
    "model_attributes_type": "must be a table",
}
"""Pydantic error types in the words a person would use (the value follows in parentheses)."""


_BYTE_KEYS = frozenset({"max_memory", "max_output", "reemit_budget"})
"""Keys whose values are bytes: their bounds are printed as ``1 MiB (1048576 bytes)``."""


def _readable_bytes(count: int) -> str:
    """``count`` bytes for a person: ``1 MiB (1048576 bytes)``, or ``512 bytes``."""
    for power, unit in ((50, "PiB"), (40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")):
        if count >= 1 << power:
            size = count / (1 << power)
            shown = f"{size:.0f}" if size == int(size) else f"{size:.1f}"
            return f"{shown} {unit} ({count} bytes)"
    return f"{count} bytes"


def _plain_message(error: Any, in_stages: bool) -> str:
    """One validation error as a person would write it (never the validator's own wording)."""
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "extra_forbidden":
        return ("unknown key (see docs/stage-authors.md for the keys a stage takes)" if in_stages
                else "unknown key (see the README's Configuration)")
    if kind == "value_error":
        return str(error["msg"]).removeprefix("Value error, ")
    bounds = {"greater_than": ("more than", "gt"), "greater_than_equal": ("at least", "ge"),
              "less_than": ("less than", "lt"), "less_than_equal": ("at most", "le")}
    if kind in bounds:
        words, key = bounds[kind]
        limit = ctx.get(key)
        if isinstance(limit, int) and error["loc"] and error["loc"][-1] in _BYTE_KEYS:
            text = f"must be {words} {_readable_bytes(limit)}"
        elif isinstance(limit, int):
            text = f"must be {words} {limit}"
        else:
            text = f"must be {words} {limit:g}" if isinstance(limit, float) else \
                f"must be {words} {limit}"
    elif kind == "string_too_long":
        text = f"must be at most {ctx.get('max_length')} characters"
    elif kind == "string_pattern_mismatch":
        text = ("must start with a letter or digit and hold only letters, digits, '.', '_' "
                "and '-'")
    elif kind == "literal_error":
        text = f"must be one of {ctx.get('expected')}"
    else:
        text = _PLAIN.get(kind, str(error["msg"]))
    value = error.get("input")
    if kind != "missing" and isinstance(value, (str, int, float, bool)):
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        text += f" (it is {shown})"
    return text


def _key_path(parts: list[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part + 1}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


MAX_LISTED_PROBLEMS = 10
"""Problems a config error lists one by one; past them it says how many more there are."""


def _format_error(where: str, err: ValidationError, data: dict[str, Any]) -> str:
    """Every problem of ``err`` (up to :data:`MAX_LISTED_PROBLEMS`), on one line: ``where``,
    then each problem's key and what to write instead, ``; ``-separated."""
    errors = err.errors()
    shown = [_format_one(e, data) for e in errors[:MAX_LISTED_PROBLEMS]]
    if len(errors) == 1:
        return f"{where}: {shown[0]}"
    more = len(errors) - len(shown)
    tail = f"; and {more} more (fix these first)" if more else ""
    return f"{where}: {len(errors)} problems: " + "; ".join(
        f"({i}) {text}" for i, text in enumerate(shown, 1)) + tail


def _known_keys(parts: list[Any]) -> list[str]:
    """The keys the table at ``parts`` (a location without its last key) takes."""
    if parts[:1] == ["stages"]:
        model: type[BaseModel] = StageWhen if "when" in parts[2:3] else StageSpec
        return list(model.model_fields)
    return [k for k in DigestConfig.model_fields if k not in ("source", "stages_from")]


def _format_one(first: Any, data: dict[str, Any]) -> str:
    """One problem: its location (a stage by name and number, a key path) and the fix."""
    parts = list(first["loc"])
    in_stages = parts[:1] == ["stages"]
    if len(parts) >= 2 and in_stages and isinstance(parts[1], int):
        # Name the stage, not its 0-based index: `[[stages]] 'todo' (number 5): key 'timeuot'`.
        stages = data.get("stages")
        entry = stages[parts[1]] if isinstance(stages, list) and parts[1] < len(stages) else {}
        name = entry.get("name") if isinstance(entry, dict) else None
        label = f"'{name}'" if isinstance(name, str) else "(unnamed)"
        key = _key_path(parts[2:])
        loc = f"[[stages]] {label} (number {parts[1] + 1})" + (f": key '{key}'" if key else "")
    elif parts:
        loc = f"key '{_key_path(parts)}'"
    else:
        loc = ""  # a whole-file rule (unique names, needs): the message names the stages
    msg = _plain_message(first, in_stages)
    if first["type"] == "extra_forbidden" and parts and isinstance(parts[-1], str):
        import difflib

        close = difflib.get_close_matches(parts[-1], _known_keys(parts[:-1]), n=1)
        if close:
            msg = msg.replace("unknown key", f"unknown key: did you mean '{close[0]}'?", 1)
    return f"{loc + ': ' if loc else ''}{msg}"


def parse_config(data: dict[str, Any], where: str) -> DigestConfig:
    """Validate an already-parsed TOML table into a :class:`DigestConfig`.

    Raises:
        ConfigError: one line naming ``where``, the key and what is wrong.
    """
    stages_from = ("the embedded default stages" if where == "<embedded default>"
                   else f"the stages of {where}")
    if "stages" not in data and where != "<embedded default>":
        # A file that sets only `budget = 60` keeps the default stages (an explicit
        # `stages = []` means none): a bigger budget must not silently empty the digest.
        data = {**data, "stages": tomllib.loads(default_config_text())["stages"]}
        stages_from = f"the embedded default stages ({where} has no 'stages')"
    try:
        return DigestConfig.model_validate({**data, "source": where, "stages_from": stages_from})
    except ValidationError as err:
        raise ConfigError(_format_error(where, err, data)) from None


def _read_toml(path: Path, *, special_ok: bool = False) -> dict[str, Any]:
    """The TOML table of ``path``, read capped and never blocking
    (:func:`supervisor.config._plan.read_config_bytes`). Raises ConfigError (one line) for a file that
    cannot be read or parsed, including nesting too deep for the parser (``RecursionError``)."""
    data = read_config_bytes(path, special_ok=special_ok)
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: not UTF-8 text (byte {err.start})") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None
    except (RecursionError, MemoryError):
        raise ConfigError(f"{path}: not valid TOML: nested too deeply to parse") from None


def default_config_text() -> str:
    """The embedded default digest as TOML text (``supervisor/default.toml``)."""
    return resources.files("supervisor").joinpath("default.toml").read_text("utf-8")


def load_config_raw(project_dir: StrPath, explicit: StrPath | None = None) -> DigestConfig:
    """Load and validate the digest for ``project_dir``, without environment overrides.

    Order: ``explicit`` (``--config``), ``supervise.toml``, ``[tool.supervise]`` in
    ``pyproject.toml``, the embedded default.

    Raises:
        ConfigError: the file cannot be read, is not TOML, or does not validate; the message
            is one line naming the file and the key.
    """
    found = explicit if explicit is not None else find_config(project_dir)
    if found is None:
        return embedded_default()
    path = Path(found)
    if path.name == "pyproject.toml" and explicit is None:
        tool = _read_toml(path).get("tool")
        table = tool.get("supervise") if isinstance(tool, dict) else None
        if table is None:  # "[tool.supervise" only in a comment or a string
            return embedded_default()
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: key 'tool.supervise': expected a table")
        return parse_config(table, f"{path} [tool.supervise]")
    return parse_config(_read_toml(path, special_ok=explicit is not None), str(path))


def load_config(project_dir: StrPath, explicit: StrPath | None = None) -> DigestConfig:
    """:func:`load_config_raw` plus ``SUPERVISE_TIMEOUT`` / ``SUPERVISE_GRACE`` (seconds).

    The hook's hot path uses :func:`supervisor.config._plancache.load_plan` instead (cached, no pydantic).

    Raises:
        ConfigError: as :func:`load_config_raw`, or a bad environment override.
    """
    from ._plan import env_overrides

    config = load_config_raw(project_dir, explicit)
    update = env_overrides()
    return config.model_copy(update=update) if update else config


def embedded_default() -> DigestConfig:
    """The embedded default digest, without environment overrides."""
    return parse_config(tomllib.loads(default_config_text()), "<embedded default>")
