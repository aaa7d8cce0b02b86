"""Run a digest as the CLI does (subreaper, own descriptors, the first stages started before
the event loop, built-ins forked), with the built-in stages taken from another folder.

Usage: python forked_digest.py STAGES_DIR PROJECT CONFIG_JSON
CONFIG_JSON: the digest as a dict (``budget``, ``grace``, ``stages``: stage tables as in
supervise.toml). Prints one JSON line: ``{"forked": {name: bool}, "leaders": {name: pid},
"result": <DigestResult.to_json()>}``; with ``--abandon`` the engine never runs: the stages
are started, their pids printed (``{"leaders": ...}``), then :meth:`Prestart.abandon` is called;
with ``--hang`` they are printed and the driver sleeps (to be SIGKILLed).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import supervisor.config._builtins as builtins


def main() -> int:
    stages_dir, project, config = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
    abandon = "--abandon" in sys.argv[4:]
    hang = "--hang" in sys.argv[4:]  # the engine never comes: the test SIGKILLs us
    builtins.stages_dir = lambda: stages_dir  # type: ignore[assignment]
    from supervisor.config._context import SessionContext
    from supervisor.config._schema import DigestConfig
    from supervisor.engine import _reaper, _spawn
    from supervisor.engine._launch import prestart

    from supervisor.config._plan import as_plan

    plan = as_plan(DigestConfig.model_validate(config))
    ctx = SessionContext(project_dir=str(project), state_dir=str(project / ".supervise"))
    _reaper.enable_subreaper()
    _spawn.own_descriptors()
    os.chdir(project)
    started = prestart(plan, ctx)
    forked = {name: s.child.forked for name, s in started.stages.items()}
    leaders = {name: s.child.pid for name, s in started.stages.items()}
    if hang:
        print(json.dumps({"leaders": leaders, "forked": forked}), flush=True)
        import time

        time.sleep(300)
    if abandon:
        print(json.dumps({"leaders": leaders, "forked": forked}), flush=True)
        started.abandon()
        return 0
    try:
        import anyio

        from supervisor.engine._run import run_digest

        result = anyio.run(lambda: run_digest(plan, ctx, prestart=started))
    finally:
        started.abandon()
    print(json.dumps({"forked": forked, "leaders": leaders, "result": json.loads(result.to_json())}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
