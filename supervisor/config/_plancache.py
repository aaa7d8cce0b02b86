"""The digest plan, cached: a hook run whose config did not change never imports pydantic.

``supervise.toml`` is validated by the pydantic models of :mod:`supervisor.config._schema` (whose
imports cost several times a whole hook: docs/benchmarks.md, row "SessionStart, two
installations on one project"); the resulting :class:`~supervisor.config._plan.DigestPlan` is cached as JSON in the
user's cache dir, keyed by the config file's identity (path, size, mtime, inode) and the
package's own files (:data:`_CODE_FILES`), so a later run loads it with :mod:`json` alone.
Environment overrides (``SUPERVISE_TIMEOUT``, ``SUPERVISE_GRACE``) are applied after the cache,
so they are never cached.

Kept apart from :mod:`supervisor.config._plan` so that data flows one way: this loader sits above both
the config models and the plan (``_plancache -> _config -> _plan``), and neither imports it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from .. import _jsontext
from .._errors import ConfigError
from ._plan import DigestPlan, apply_env_overrides, find_config

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs the hot path
if TYPE_CHECKING:
    from _typeshed import StrPath
    from typing import Any

CACHE_FILE = "config-cache.json"
"""Name pattern of the cache file: :func:`cache_file` adds the installation's tag."""
_MAX_CACHE = 1024 * 1024
"""Bytes: the config cache is read up to this; a bigger file is not ours (set aside)."""
_CODE_FILES = ("config/_schema.py", "config/_plan.py", "config/_plancache.py", "default.toml")
"""The package's files (relative to its folder) whose change invalidates every cached plan."""


def _package_dir() -> str:
    """The ``supervisor`` package's folder (whatever subpackage this module sits in)."""
    return os.path.dirname(os.path.realpath(str(sys.modules[__name__.partition(".")[0]].__file__)))


def _identity(path: StrPath | None) -> list[Any]:
    here = _package_dir()
    key: list[Any] = []
    for name in _CODE_FILES:
        try:
            st = os.stat(os.path.join(here, name))
            key.append([name, st.st_size, st.st_mtime_ns])
        except OSError:
            key.append([name, None])
    if path is not None:
        st = os.stat(path)
        key.append([os.path.realpath(path), st.st_size, st.st_mtime_ns, st.st_ino])
    return key


def _short_name(raw: bytes) -> str:
    import zlib  # a short stable name, not a security hash (hashlib's import costs the hook)

    return f"{zlib.crc32(raw):08x}{zlib.adler32(raw):08x}"


def cache_file(cache_dir: StrPath) -> str:
    """The config cache of *this installation* in ``cache_dir``:
    ``config-cache-<tag>.json``, the tag named after the package's folder, so two
    installations used on one project (a venv and a user install, two checkouts) each keep
    their own entry instead of evicting each other on every hook."""
    here = _package_dir().encode("utf-8", "surrogateescape")
    stem, _, suffix = CACHE_FILE.rpartition(".")
    return os.path.join(cache_dir, f"{stem}-{_short_name(here)}.{suffix}")


def default_cache_dir(project_dir: StrPath) -> str | None:
    """Per-project cache folder in the user's cache dir (``$XDG_CACHE_HOME`` or ``~/.cache``):
    a terminal digest must not create ``.supervise/`` in a project that never installed us.
    None when there is no home (:func:`supervisor._home.home_dir`): then no cache at all,
    never a relative ``~/.cache`` in the working directory."""
    from .._home import cache_dir

    base = cache_dir()
    if base is None:
        return None
    return os.path.join(base, _short_name(os.fspath(project_dir).encode("utf-8", "surrogateescape")))


def _with_env(plan: DigestPlan, on_env_error: Callable[[str], None] | None) -> DigestPlan:
    try:
        return apply_env_overrides(plan)
    except ConfigError as err:
        if on_env_error is None:
            raise
        on_env_error(str(err))
        return plan


def load_plan(project_dir: StrPath, explicit: StrPath | None = None,
              cache_dir: StrPath | None = None,
              on_env_error: Callable[[str], None] | None = None) -> DigestPlan:
    """Load the digest for ``project_dir`` as a plan, from the cache when it is current.

    Same order and errors as :func:`supervisor.config._schema.load_config`; ``cache_dir`` (default:
    :func:`default_cache_dir`) holds one cache file per installation (:func:`cache_file`);
    no home (then no default) or an unwritable cache dir just means
    no cache. Environment overrides are applied to the result; a bad one raises, or, with
    ``on_env_error``, is reported through it (one line) and ignored.

    Raises:
        ConfigError: one line naming the file and the key.
    """
    path = explicit if explicit is not None else find_config(project_dir)
    try:
        key = _identity(path)
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror}") from None
    if cache_dir is None:
        cache_dir = default_cache_dir(project_dir)
    if cache_dir is None:  # no home: no cache, the config is read each time
        from ._schema import load_config_raw

        config = load_config_raw(project_dir, explicit)
        plan = DigestPlan.from_mapping({**config.model_dump(mode="json"), "source": config.source})
        return _with_env(plan, on_env_error)
    from .._errors import StateError
    from ..state._statedir import StateDir

    cache_name = os.path.basename(cache_file(cache_dir))
    try:  # through the state door: no link followed, capped, a corrupt cache set aside
        cache = StateDir.open_existing(cache_dir)
        if cache is not None:
            with cache:
                cached = cache.read_json(cache_name, _MAX_CACHE)
            if (isinstance(cached, dict) and cached.get("key") == key
                    and isinstance(cached.get("plan"), dict)):
                return _with_env(DigestPlan.from_mapping(cached["plan"]), on_env_error)
    except (StateError, ValueError, TypeError, AttributeError, RecursionError):
        pass
    from ._schema import load_config_raw

    config = load_config_raw(project_dir, explicit)
    plan = DigestPlan.from_mapping({**config.model_dump(mode="json"), "source": config.source})
    try:
        with StateDir.open(cache_dir, create=True) as cache:
            cache.write(cache_name, _jsontext.dumps({"key": key, "plan": plan.to_mapping()}).encode())
    except StateError:
        pass
    return _with_env(plan, on_env_error)
