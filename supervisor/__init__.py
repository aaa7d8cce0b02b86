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

import importlib
from typing import TYPE_CHECKING, Any

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
    "BufferSink": "._output",
    "Sink": "._output",
    "StreamSink": "._output",
    "ConfigError": "._errors",
    "StateError": "._errors",
    "SupervisorError": "._errors",
    "DigestConfig": "._config",
    "StageSpec": "._config",
    "load_config": "._config",
    "SessionContext": "._context",
    "DigestResult": "._results",
    "StageResult": "._results",
    "run_digest": "._engine",
    "run_command": "._engine",
}

if TYPE_CHECKING:
    from ._config import DigestConfig as DigestConfig
    from ._config import StageSpec as StageSpec
    from ._config import load_config as load_config
    from ._context import SessionContext as SessionContext
    from ._results import DigestResult as DigestResult
    from ._results import StageResult as StageResult
    from ._engine import run_command as run_command
    from ._engine import run_digest as run_digest
    from ._errors import ConfigError as ConfigError
    from ._errors import StateError as StateError
    from ._errors import SupervisorError as SupervisorError
    from ._output import BufferSink as BufferSink
    from ._output import Sink as Sink
    from ._output import StreamSink as StreamSink


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'supervisor' has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted((*globals(), *__all__))
