"""watchkeeper: bounded, streaming session-start digests for coding-agent harnesses.

The public door. Names are imported lazily (PEP 562) so that a stage program or the hook's
hot path can import a small submodule without paying for anyio and pydantic.

Example::

    import anyio
    from supervisor import SessionContext, load_config, run_digest

    async def main() -> None:
        ctx = SessionContext.for_project(Path.cwd())
        result = await run_digest(load_config(ctx.project_dir), ctx)
        print(result.truncated, [s.status for s in result.stages])

    anyio.run(main)
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: every `supervise` run imports this module
# first, and `typing` (with `re` and `enum`) is most of its cost: a Ctrl-C during those
# milliseconds comes before the CLI's quiet signal handlers (supervisor._interrupts)

__all__ = (
    "BufferSink",
    "ConfigError",
    "DigestConfig",
    "DigestResult",
    "SessionContext",
    "Sink",
    "StageResult",
    "StageSpec",
    "StateError",
    "StreamSink",
    "SupervisorError",
    "load_config",
    "run_command",
    "run_digest",
)

_WHERE = {
    "BufferSink": ".engine._output",
    "Sink": ".engine._output",
    "StreamSink": ".engine._output",
    "ConfigError": "._errors",
    "StateError": "._errors",
    "SupervisorError": "._errors",
    "DigestConfig": ".config._schema",
    "StageSpec": ".config._schema",
    "load_config": ".config._schema",
    "SessionContext": ".config._context",
    "DigestResult": ".engine._results",
    "StageResult": ".engine._results",
    "run_digest": ".engine._run",
    "run_command": ".engine._run",
}

if TYPE_CHECKING:
    from typing import Any

    from .config._schema import DigestConfig as DigestConfig
    from .config._schema import StageSpec as StageSpec
    from .config._schema import load_config as load_config
    from .config._context import SessionContext as SessionContext
    from .engine._results import DigestResult as DigestResult
    from .engine._results import StageResult as StageResult
    from .engine._run import run_command as run_command
    from .engine._run import run_digest as run_digest
    from ._errors import ConfigError as ConfigError
    from ._errors import StateError as StateError
    from ._errors import SupervisorError as SupervisorError
    from .engine._output import BufferSink as BufferSink
    from .engine._output import Sink as Sink
    from .engine._output import StreamSink as StreamSink


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'supervisor' has no attribute {name!r}")
    # `from <where> import <name>`, without importlib (and the `warnings` it imports: every
    # `supervise` run imports this module first)
    value = getattr(__import__(where.lstrip("."), globals(), None, [name], 1), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted((*globals(), *__all__))
