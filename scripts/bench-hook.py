#!/usr/bin/env python3
"""Measure the hook's fixed cost: ``supervise hook claude`` on an empty digest vs ``python -c pass``.

usage: python scripts/bench-hook.py [--runs 20] [--harness claude] [--check 2.0]

Both are run ``--runs`` times, interleaved, in a temporary git repo whose ``supervise.toml``
has no stages, with a startup payload on stdin; the medians (milliseconds) and their ratio are
printed. ``--check R`` exits 1 when the ratio is above R (the issue's target is 2.0).
Run it with the project's interpreter (``.venv/bin/python scripts/bench-hook.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _time(argv: list[str], cwd: Path, stdin: bytes, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=env, check=False)
    return (time.perf_counter() - start) * 1000.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--harness", default="claude")
    ap.add_argument("--check", type=float, default=None, metavar="RATIO")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-hook-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        (repo / "supervise.toml").write_text("budget = 10\n")
        env = {**os.environ, "SUPERVISE_STATE_DIR": str(Path(tmp) / "state")}
        payload = json.dumps({"session_id": "bench", "cwd": str(repo), "hook_event_name": "SessionStart",
                              "source": "startup"}).encode()
        floor_argv = [sys.executable, "-c", "pass"]
        hook_argv = [sys.executable, "-P", "-m", "supervisor", "hook", args.harness]
        _time(hook_argv, repo, payload, env)  # warm the OS caches and byte-code
        floor, hook = [], []
        for _ in range(args.runs):
            floor.append(_time(floor_argv, repo, b"", env))
            hook.append(_time(hook_argv, repo, payload, env))
    f, h = statistics.median(floor), statistics.median(hook)
    ratio = h / f
    print(f"python -c pass: median {f:.1f} ms over {args.runs} runs")
    print(f"supervise hook {args.harness} (empty digest): median {h:.1f} ms")
    print(f"ratio: {ratio:.2f}x" + (f" (target <= {args.check:g}x)" if args.check else ""))
    return 1 if args.check is not None and ratio > args.check else 0


if __name__ == "__main__":
    sys.exit(main())
