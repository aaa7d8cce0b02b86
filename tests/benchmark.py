"""Benchmark: ratios measured side by side in one run. Usage: python tests/benchmark.py [--quick]

Prints a Markdown table (docs/benchmarks.md keeps dated copies). Each figure is a median of
repeated runs on this machine; ratios compare against baselines measured in the same run, so
they travel between machines better than seconds do.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil

from helpers import peak_rss_until_exit  # tests/ is this script's own folder

ROOT = Path(__file__).resolve().parent.parent
SUPERVISE = [sys.executable, "-m", "supervisor"]
HOSTILE = [sys.executable, str(ROOT / "tests" / "resources" / "hostile.py")]


def timed(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
          stdin: bytes = b"") -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, input=stdin, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def median(argv: list[str], runs: int, **kw: object) -> float:
    timed(argv, **kw)  # warm the page cache
    return statistics.median(timed(argv, **kw) for _ in range(runs))  # type: ignore[arg-type]


def bench_run_overhead(runs: int) -> list[tuple[str, str, str]]:
    true = shutil.which("true") or "/bin/true"
    base = median([true], runs)
    gnu = median(["timeout", "10", true], runs) if shutil.which("timeout") else float("nan")
    ours = median([*SUPERVISE, "run", "--", true], runs)
    return [("`supervise run -- true` vs `/bin/true`", f"{ours * 1000:.1f} ms vs {base * 1000:.1f} ms",
             f"{ours / base:.1f}x"),
            ("`supervise run -- true` vs `timeout 10 true`", f"{ours * 1000:.1f} ms vs {gnu * 1000:.1f} ms",
             f"{ours / gnu:.1f}x")]


def bench_parallel(tmp: Path, runs: int) -> tuple[str, str, str]:
    project = tmp / "par"
    project.mkdir()
    stages = "".join(f'[[stages]]\nname = "s{i}"\nrun = "sleep 0.2"\n' for i in range(10))
    (project / "supervise.toml").write_text(stages)
    script = "for i in $(seq 10); do timeout 10 sleep 0.2; done"
    seq = median(["bash", "-c", script], max(3, runs // 4))
    ours = median([*SUPERVISE, "digest", "-C", str(project)], max(3, runs // 4))
    return ("digest of 10 x `sleep 0.2` vs the same in sequence under `timeout` (target <= 0.2)",
            f"{ours:.2f} s vs {seq:.2f} s", f"{ours / seq:.2f}")


def _survivors(token: str) -> int:
    count = 0
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("BENCH_TOKEN") == token and proc.status() != psutil.STATUS_ZOMBIE:
                count += 1
                proc.kill()  # clean up what we started
        except psutil.Error:
            continue
    return count


def bench_overrun(tmp: Path) -> list[tuple[str, str, str]]:
    project = tmp / "over"
    project.mkdir()
    budget = 3.0
    (project / "supervise.toml").write_text(
        f'budget = {budget}\ngrace = 1\n[[stages]]\nname = "evil"\n'
        f'run = {json.dumps(HOSTILE + ["term-ignoring-child"])}\n'
        f'[[stages]]\nname = "escapee"\nrun = {json.dumps(HOSTILE + ["double-fork"])}\n')
    token = uuid.uuid4().hex
    env = {**os.environ, "BENCH_TOKEN": token}
    wall = timed([*SUPERVISE, "digest", "-C", str(project)], env=env)
    time.sleep(0.5)  # let anything that escaped show itself
    survivors = _survivors(token)
    return [("seconds past a 3 s budget, TERM-resistant tree + daemon (target < 0.25)",
             f"{wall:.3f} s wall", f"{wall - budget:+.3f} s"),
            ("survivors after that digest (target 0)", "", str(survivors))]


def bench_rss(tmp: Path, mib: int) -> tuple[str, str, str]:
    project = tmp / "rss"
    project.mkdir()
    (project / "supervise.toml").write_text(
        f'[[stages]]\nname = "flood"\nrun = {json.dumps(HOSTILE + ["flood", str(mib)])}\n')
    proc = subprocess.Popen([*SUPERVISE, "digest", "-C", str(project)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    peak = peak_rss_until_exit(proc)
    return (f"peak RSS of `supervise digest` while a stage streams {mib} MB (target < 80 MB)",
            f"{peak / 2**20:.1f} MiB", f"{peak / (80 * 2**20):.2f} of target")


def bench_hook(tmp: Path, runs: int) -> tuple[str, str, str]:
    project = tmp / "hook"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / "supervise.toml").write_text("budget = 10\nstages = []\n")  # an empty digest
    floor = median([sys.executable, "-c", "pass"], runs)
    payload = json.dumps({"session_id": "bench", "cwd": str(project), "source": "startup",
                          "hook_event_name": "SessionStart"}).encode()
    env = {**os.environ, "SUPERVISE_STATE_DIR": str(tmp / "hook-state")}
    ours = median([*SUPERVISE, "hook", "claude"], runs, cwd=project, env=env, stdin=payload)
    return ("`supervise hook claude` on an empty digest vs `python -c pass` (target < 2.0x)",
            f"{ours * 1000:.1f} ms vs {floor * 1000:.1f} ms", f"{ours / floor:.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    runs = 5 if args.quick else 20
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rows += bench_run_overhead(runs)
        rows.append(bench_parallel(tmp, runs))
        rows += bench_overrun(tmp)
        rows.append(bench_rss(tmp, 200))
        rows.append(bench_hook(tmp, runs))
    print(f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores, "
          f"Python {sys.version.split()[0]}, medians of {runs} runs.\n")
    print("| measurement | figures | ratio |\n|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
