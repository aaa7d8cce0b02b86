"""Benchmark: ratios measured side by side in one run. Usage: python tests/benchmark.py [--quick]

Prints a Markdown table (docs/benchmarks.md holds the current one and how to reproduce it).
Each figure is a median of repeated runs on this machine; ratios compare against baselines
measured in the same run, so they travel between machines better than seconds do.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psutil

from helpers import peak_rss_until_exit  # tests/ is this script's own folder

ROOT = Path(__file__).resolve().parent.parent
SUPERVISE = [sys.executable, "-m", "supervisor"]
LAUNCHER = Path(sys.executable).with_name("supervise")
"""The installed ``supervise`` beside this interpreter (bin/supervise, what a user runs), for
the ``supervise run`` rows; ``python -m supervisor`` where there is none (not a venv)."""
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


CHAINS = ("import os, signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
          "for _ in range(8):\n    if os.fork() == 0:\n        while True:\n"
          "            if os.fork() != 0:\n                os._exit(0)\nsignal.pause()\n")
BUSY = "import os\nfor _ in range(3): os.fork()\nwhile True: pass"
SLEEPERS = ("import os, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "for _ in range(999):\n    if os.fork() == 0:\n        time.sleep(60)\n"
            "        os._exit(0)\nprint('1000 members', flush=True)\ntime.sleep(60)\n")


def _stress_project(tmp: Path, name: str, budget: float, stages: list[str]) -> Path:
    project = tmp / name
    project.mkdir()
    body = f"budget = {budget}\ngrace = 0.5\n" + "".join(
        f'[[stages]]\nname = "s{i}"\nrun = {json.dumps(argv)}\n'
        for i, argv in enumerate(stages))
    (project / "supervise.toml").write_text(body)
    quiet = tmp / f"{name}-startup"
    quiet.mkdir()
    (quiet / "supervise.toml").write_text(f"budget = {budget}\ngrace = 0.5\n" + "".join(
        f'[[stages]]\nname = "s{i}"\nrun = "true"\n' for i in range(len(stages))))
    return project


def _past_budget(tmp: Path, name: str, budget: float, stages: list[str], runs: int,
                 ) -> tuple[float, float, int, float]:
    """Median seconds past the budget (wall minus budget minus the same digest's start-up
    cost, measured interleaved), the start-up cost, the survivors over all runs, and the
    worst seconds past the budget on the engine's own clock (``--format json``)."""
    project = _stress_project(tmp, name, budget, stages)
    quiet = tmp / f"{name}-startup"
    over, startup, inner, survivors = [], [], [], 0
    for _ in range(runs):
        token = uuid.uuid4().hex
        env = {**os.environ, "BENCH_TOKEN": token, "SUPERVISE_CGROUP_ROOT": "off"}
        startup.append(timed([*SUPERVISE, "digest", "-C", str(quiet)], env=env))
        t0 = time.perf_counter()
        out = subprocess.run([*SUPERVISE, "digest", "-C", str(project), "--format", "json"],
                             env=env, capture_output=True, check=False).stdout
        over.append(time.perf_counter() - t0 - budget)
        inner.append(json.loads(out)["seconds"] - budget)
        time.sleep(0.5)  # anything that escaped shows itself
        survivors += _survivors(token)
    base = statistics.median(startup)
    return statistics.median(over) - base, base, survivors, max(inner)


def bench_stress(tmp: Path, runs: int) -> list[tuple[str, str, str]]:
    """Issue 10: the watchdog under stress (the sweep, no cgroup)."""
    py = "python3"
    rows = []
    past, base, left, inner = _past_budget(tmp, "chains", 3.0, [[py, "-c", CHAINS]], runs)
    rows.append(("seconds past a 3 s budget: TERM-ignoring stage, 8 fork-and-exit chains "
                 "(issue 10 ex. 2; target <= 0.25)",
                 f"start-up {base:.3f} s; engine's own clock, worst {inner:+.3f} s", f"{past:+.3f} s"))
    rows.append(("survivors after those digests (target 0)", f"{runs} runs", str(left)))
    past, base, left, inner = _past_budget(tmp, "starve", 3.0, [[py, "-c", BUSY]] * 16, runs)
    rows.append(("seconds past a 3 s budget: 16 stages x 8 busy loops on "
                 f"{os.cpu_count()} cores (ex. 3; target <= 0.25)",
                 f"start-up {base:.3f} s; engine's own clock, worst {inner:+.3f} s", f"{past:+.3f} s"))
    rows.append(("survivors after those digests (target 0)", f"{runs} runs", str(left)))
    rows.append(_zombies_mid_run(tmp))
    rows.append(_rss_with_members(tmp))
    return rows


def _zombies_mid_run(tmp: Path) -> tuple[str, str, str]:
    project = tmp / "orphans"
    project.mkdir()
    script = "i=0; while [ $i -lt 300 ]; do (sleep 0.01 &); i=$((i+1)); done; sleep 3"
    (project / "supervise.toml").write_text(
        f'budget = 10\n[[stages]]\nname = "orphans"\nshell = true\nrun = {json.dumps(script)}\n')
    proc = subprocess.Popen([*SUPERVISE, "digest", "-C", str(project)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    peak = 0
    while proc.poll() is None:
        try:
            kids = psutil.Process(proc.pid).children()
            peak = max(peak, sum(1 for k in kids if k.status() == psutil.STATUS_ZOMBIE))
        except psutil.Error:
            pass
        time.sleep(0.02)
    return ("zombies under the supervisor mid-run, a stage making 300 short-lived orphans "
            "(ex. 1; target <= 50)", "peak, polled every 20 ms", str(peak))


def _rss_with_members(tmp: Path) -> tuple[str, str, str]:
    project = tmp / "members"
    project.mkdir()
    (project / "supervise.toml").write_text(
        f'budget = 20\ngrace = 0.5\n[[stages]]\nname = "many"\n'
        f'run = {json.dumps(["python3", "-c", SLEEPERS])}\ntimeout = 6\nmax_tasks = 2000\n')
    token = uuid.uuid4().hex
    env = {**os.environ, "BENCH_TOKEN": token, "SUPERVISE_CGROUP_ROOT": "off"}
    t0 = time.perf_counter()
    proc = subprocess.Popen([*SUPERVISE, "digest", "-C", str(project)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env)
    peak = peak_rss_until_exit(proc)
    wall = time.perf_counter() - t0
    left = _survivors(token)
    return ("peak RSS of the supervisor, one stage of 1000 TERM-ignoring members killed at its "
            "6 s timeout (report)", f"{peak / 2**20:.1f} MiB; wall {wall:.2f} s; survivors {left}",
            f"{peak / 2**20:.1f} MiB")


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


# -- issue 13: per-event hooks, session start on a large repository, engine overheads ---------
FAST_PATH = ROOT / "supervisor" / "hook-fast.sh"
NO_BYTECODE_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
GIT_CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}


def interleaved(cases: dict[str, Callable[[], float]], runs: int) -> dict[str, float]:
    """Medians of ``runs`` rounds, each round timing every case once, one after another (a
    loaded host slows all of them alike, so the ratios stay fair)."""
    for fn in cases.values():
        fn()  # warm caches
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, fn in cases.items():
            samples[name].append(fn())
    return {name: statistics.median(values) for name, values in samples.items()}


def interleaved_cpu(cases: dict[str, Callable[[], float]],
                    runs: int) -> tuple[dict[str, float], dict[str, float]]:
    """:func:`interleaved`, and the median CPU seconds (user + system, of the children waited
    for) each case took."""
    import resource

    cpu: dict[str, list[float]] = {name: [] for name in cases}

    def counted(name: str, fn: Callable[[], float]) -> Callable[[], float]:
        def run() -> float:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            wall = fn()
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            return wall
        return run

    got = interleaved({name: counted(name, fn) for name, fn in cases.items()}, runs)
    return got, {name: statistics.median(values[1:]) for name, values in cpu.items()}


def _payload(cwd: Path, event: str, session: str = "bench", **extra: object) -> bytes:
    return json.dumps({"session_id": session, "transcript_path": "/nowhere.jsonl",
                       "cwd": str(cwd), "hook_event_name": event, **extra},
                      separators=(",", ":")).encode()


def bench_event_hooks(tmp: Path, runs: int) -> list[tuple[str, str, str]]:
    project = tmp / "event hooks"
    (project / "src" / "pkg").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / "src" / "pkg" / "mod.py").write_text("x = 1\n")
    (project / "nested").mkdir()
    (project / "nested" / "AGENTS.md").write_text("nested rules\n")
    env = {**NO_BYTECODE_ENV}
    env.pop("SUPERVISE_STATE_DIR", None)
    # the per-event command as `supervise install claude` registers it (its `--early-exit`
    # comes from the harness table), less its `--event`
    from supervisor.adapters import ADAPTERS
    from supervisor.commands.install import hook_command

    hook = shlex.split(hook_command(ADAPTERS["claude"], "prompt", sys.executable))[:-2]
    python_at = hook.index(sys.executable)
    prompt = _payload(project, "UserPromptSubmit", prompt="add a test")
    read = _payload(project, "PostToolUse", tool_name="Read",
                    tool_input={"file_path": str(project / "src" / "pkg" / "mod.py")},
                    tool_response={"content": "y" * 200_000})
    # A result is delivered only for a stage configured deferred, signed with this user's
    # result key (issue 11): its own project, and a key under a private XDG_STATE_HOME.
    deliver = tmp / "deliver project"
    deliver.mkdir()
    subprocess.run(["git", "init", "-q", str(deliver)], check=True)
    (deliver / "supervise.toml").write_text(
        'budget = 10\n[[stages]]\nname = "net"\nrun = ["true"]\ndeferred = true\n')
    deliver_env = {**env, "XDG_STATE_HOME": str(tmp / "xdg state")}
    deliver_prompt = _payload(deliver, "UserPromptSubmit", prompt="add a test")
    state = deliver / ".supervise" / "deferred" / "net"
    counter = iter(range(10**9))
    sys.path.insert(0, str(ROOT))
    from supervisor.engine._deferred import _encode_result, result_key

    saved = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = deliver_env["XDG_STATE_HOME"]
    try:
        key = result_key(create=True)
    finally:
        if saved is None:
            os.environ.pop("XDG_STATE_HOME", None)
        else:
            os.environ["XDG_STATE_HOME"] = saved
    assert key is not None

    def with_result() -> float:
        state.mkdir(parents=True, exist_ok=True)
        run = f"{next(counter)}-bench"
        (state / f"result-{run}.json").write_bytes(_encode_result(
            {"name": "net", "run_id": run, "title": "net", "status": "ok", "seconds": 0.1,
             "finished": time.time(), "output": "OK"}, 1 << 20, key))
        return timed([*hook, "--event", "prompt"], cwd=deliver, env=deliver_env, stdin=deliver_prompt)

    def nested_read() -> float:
        payload = _payload(project, "PostToolUse", session=f"s{next(counter)}", tool_name="Read",
                           tool_input={"file_path": str(project / "nested" / "a.py")},
                           tool_response={"content": "y" * 200_000})
        return timed([*hook, "--event", "post-tool"], cwd=project, env=env, stdin=payload)

    # a read under a folder whose AGENTS.md this session already got in this epoch: the
    # shim's injected index answers (the first read, through Python, injects and indexes it)
    injected_read = _payload(project, "PostToolUse", session="bench-injected", tool_name="Read",
                             tool_input={"file_path": str(project / "nested" / "b.py")},
                             tool_response={"content": "y" * 200_000})
    subprocess.run([*hook, "--event", "post-tool"], cwd=project, env=env, input=injected_read,
                   stdout=subprocess.DEVNULL, check=True)

    watched = tmp / "watched project"
    watched.mkdir()
    subprocess.run(["git", "init", "-q", str(watched)], check=True)
    rules = [watched / "AGENTS.md", watched / "CLAUDE.md"]
    for path in rules:
        path.write_text("rules\n")
        os.utime(path, (1.0, 1.0))
    sys.path.insert(0, str(ROOT))
    from supervisor.session._fastpath import MTIME_SLACK, set_watch

    # The fast path compares ctimes too (which only the clock sets): a file written less than
    # MTIME_SLACK before the list counts as changed, and Python would run on every prompt.
    time.sleep(max(0.0, max(p.stat().st_ctime for p in rules) + MTIME_SLACK + 0.1 - time.time()))
    set_watch(watched / ".supervise", rules)  # what the instructions stage's baseline leaves
    watched_prompt = _payload(watched, "UserPromptSubmit", prompt="add a test")
    (project / "supervise.toml").write_text("budget = 10\nstages = []\n")
    start = _payload(project, "SessionStart", source="startup")
    marker = tmp / "python started"
    spy = tmp / "spy python"
    spy.write_text(f"#!/bin/sh\n: > '{marker}'\nexec '{sys.executable}' \"$@\"\n")
    spy.chmod(0o755)
    for cwd, event, stdin in ((project, "prompt", prompt), (project, "post-tool", read),
                              (watched, "prompt", watched_prompt),
                              (project, "post-tool", injected_read)):
        marker.unlink(missing_ok=True)
        timed([*hook[:python_at], str(spy), *hook[python_at + 1:], "--event", event], cwd=cwd,
              env=env, stdin=stdin)
        if marker.exists():  # the row would time the Python path, not the fast path
            raise SystemExit(f"benchmark setup: the {event} fast path in {cwd.name!r} started Python")
    # The Python rows must do their work, not time a refusal or an early exit.
    with_result()
    run = f"{next(counter)}-bench"
    (state / f"result-{run}.json").write_bytes(_encode_result(
        {"name": "net", "run_id": run, "title": "net", "status": "ok", "seconds": 0.1,
         "finished": time.time(), "output": "DELIVERED"}, 1 << 20, key))
    proof = subprocess.run([*hook, "--event", "prompt"], cwd=deliver, env=deliver_env,
                           input=deliver_prompt, capture_output=True, check=False)
    if b"DELIVERED" not in proof.stdout:
        raise SystemExit(f"benchmark setup: the prompt hook delivered nothing: {proof.stderr[-500:]!r}")
    proof = subprocess.run([*hook, "--event", "post-tool"], cwd=project, env=env, capture_output=True,
                           input=_payload(project, "PostToolUse", session="proof", tool_name="Read",
                                          tool_input={"file_path": str(project / "nested" / "a.py")}),
                           check=False)
    if b"nested rules" not in proof.stdout:
        raise SystemExit(f"benchmark setup: the post-tool hook injected nothing: {proof.stderr[-500:]!r}")
    got, cpu = interleaved_cpu({
        "sh": lambda: timed(["/bin/sh", "-c", ":"]),
        "python": lambda: timed([sys.executable, "-c", "pass"], env=env),
        "prompt-nothing": lambda: timed([*hook, "--event", "prompt"], cwd=project, env=env,
                                        stdin=prompt),
        "post-nothing": lambda: timed([*hook, "--event", "post-tool"], cwd=project, env=env,
                                      stdin=read),
        "post-injected": lambda: timed([*hook, "--event", "post-tool"], cwd=project, env=env,
                                       stdin=injected_read),
        "prompt-watch": lambda: timed([*hook, "--event", "prompt"], cwd=watched, env=env,
                                      stdin=watched_prompt),
        "prompt-deliver": with_result,
        "post-deliver": nested_read,
        "session-empty": lambda: timed([sys.executable, "-P", "-m", "supervisor", "hook", "claude"],
                                       cwd=project, env=env, stdin=start),
    }, runs)
    ms = lambda x: f"{x * 1000:.1f} ms"  # noqa: E731

    def row(what: str, name: str, ref: str) -> tuple[str, str, str]:
        # wall (the target), then CPU (user + system of the process and the children it
        # waited for): a loaded host stretches the wall time of short processes unevenly
        return (what, f"{ms(got[name])} vs {ms(got[ref])} (CPU {ms(cpu[name])} vs {ms(cpu[ref])})",
                f"{got[name] / got[ref]:.1f}x (CPU {cpu[name] / cpu[ref]:.1f}x)")

    return [
        row("prompt hook, nothing to do (fast path) vs `sh -c :` (target <= 3x)",
            "prompt-nothing", "sh"),
        row("prompt hook, nothing to do, with a refresh watch list of 2 files (fast path) vs "
            "`sh -c :` (target <= 3x)", "prompt-watch", "sh"),
        row("post-tool hook on a 200 KB Read, nothing to do (fast path) vs `sh -c :` (target <= 3x)",
            "post-nothing", "sh"),
        row("post-tool hook on a 200 KB Read under a folder whose AGENTS.md was injected this "
            "epoch (fast path, injected index) vs `sh -c :` (target <= 3x)", "post-injected", "sh"),
        row("prompt hook delivering a deferred result vs `python -c pass` (target <= 4x)",
            "prompt-deliver", "python"),
        row("post-tool hook injecting a nested AGENTS.md vs `python -c pass` (target <= 4x)",
            "post-deliver", "python"),
        row("SessionStart hook on an empty digest vs `python -c pass` (target <= 4x)",
            "session-empty", "python"),
    ]


def bench_planted_state(tmp: Path, runs: int) -> list[tuple[str, str, str]]:
    """Issue 11 items 2 and 4: a 3 GiB file planted as a deferred result (prompt hook) or as
    the exposure log (`status`) costs what an empty state dir costs (it is set aside unread),
    where it used to cost 16.7 s and 6.3 GB of RSS."""
    project = tmp / "planted state"
    project.mkdir()
    env = {**NO_BYTECODE_ENV}
    env.pop("SUPERVISE_STATE_DIR", None)
    result = project / ".supervise" / "deferred" / "net" / "result-1-x.json"
    log = project / ".supervise" / "exposure.jsonl"
    result.parent.mkdir(parents=True)
    prompt = [sys.executable, "-P", "-m", "supervisor", "hook", "claude", "--event", "prompt"]
    status = [sys.executable, "-P", "-m", "supervisor", "status"]

    def planted(path: Path, argv: list[str]) -> Callable[[], float]:
        def run() -> float:
            with open(path, "wb") as f:
                f.truncate(3 << 30)  # sparse: no disk used
            took = timed(argv, cwd=project, env=env)
            for old in path.parent.glob(path.name + ".corrupt*"):
                old.unlink()
            return took
        return run

    got = interleaved({
        "prompt-empty": lambda: timed(prompt, cwd=project, env=env),
        "prompt-3g": planted(result, prompt),
        "status-empty": lambda: timed(status, cwd=project, env=env),
        "status-3g": planted(log, status),
    }, runs)
    with open(result, "wb") as f:
        f.truncate(3 << 30)
    proc = subprocess.Popen(prompt, cwd=project, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rss_planted = peak_rss_until_exit(proc)
    ms = lambda x: f"{x * 1000:.1f} ms"  # noqa: E731
    return [
        ("prompt hook with a 3 GiB planted `result-*.json` vs an empty state dir (target <= 1.5x)",
         f"{ms(got['prompt-3g'])} vs {ms(got['prompt-empty'])}",
         f"{got['prompt-3g'] / got['prompt-empty']:.2f}x"),
        ("`supervise status` with a 3 GiB planted `exposure.jsonl` vs an empty state dir "
         "(target <= 1.5x)", f"{ms(got['status-3g'])} vs {ms(got['status-empty'])}",
         f"{got['status-3g'] / got['status-empty']:.2f}x"),
        ("peak RSS of that prompt hook", f"{rss_planted / 2**20:.1f} MiB", "-"),
    ]


def synthetic_repo(tmp: Path, files: int = 20_000) -> Path:
    """A git repository of ``files`` tracked files in 200 folders, four nested AGENTS.md, a
    root AGENTS.md and one modified file."""
    repo = tmp / "synthetic repo"
    for i in range(files):
        folder = repo / f"pkg{i % 200:03d}" / f"sub{i % 7}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"file{i}.py").write_text(f"VALUE = {i}\n")
    (repo / "AGENTS.md").write_text("# Root rules\nRun the tests.\n")
    for i in range(4):
        (repo / f"pkg{i:03d}" / "AGENTS.md").write_text(f"# Rules of pkg{i:03d}\n")
    git = ["git", "-C", str(repo), "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "synthetic"], check=True)
    (repo / "pkg000" / "sub0" / "file0.py").write_text("VALUE = -1\n")
    subprocess.run([*git, "status", "--porcelain"], check=True, stdout=subprocess.DEVNULL)
    return repo


def bench_large_repo_digest(tmp: Path, runs: int) -> list[tuple[str, str, str]]:
    repo = synthetic_repo(tmp)
    env = {**NO_BYTECODE_ENV, "SUPERVISE_STATE_DIR": str(tmp / "synthetic state")}
    # CPU beside the wall time: on a loaded host the wall ratio swings by 2x between runs of
    # the same code (the reference suffers more from the load), the CPU ratio far less.
    got, cpu = interleaved_cpu({
        "git": lambda: timed(["git", "-C", str(repo), "status", "--porcelain"]),
        "digest": lambda: timed([*SUPERVISE, "digest", "-C", str(repo)], env=env),
    }, max(3, runs // 2))
    return [("embedded default digest, 20,000 tracked files, 4 nested AGENTS.md, 1 modified file, "
             "vs `git status --porcelain` (target <= 2.5x, wall and CPU)",
             f"{got['digest'] * 1000:.0f} ms vs {got['git'] * 1000:.0f} ms; CPU "
             f"{cpu['digest'] * 1000:.0f} ms vs {cpu['git'] * 1000:.0f} ms",
             f"{got['digest'] / got['git']:.1f}x; CPU {cpu['digest'] / cpu['git']:.1f}x")]


def small_repo(tmp: Path, name: str = "small repo") -> Path:
    """A git repository of a few files, a root AGENTS.md (which the ``instructions`` stage
    supplies to Claude Code) and one modified file: the default digest has work to do."""
    repo = tmp / name
    (repo / "src").mkdir(parents=True)
    (repo / "AGENTS.md").write_text("# Rules\nRun the tests.\n")
    for i in range(20):
        (repo / "src" / f"mod{i}.py").write_text(f"VALUE = {i}\n")
    git = ["git", "-C", str(repo), "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=GIT_CLEAN_ENV)
    subprocess.run([*git, "add", "-A"], check=True, env=GIT_CLEAN_ENV)
    subprocess.run([*git, "commit", "-qm", "small"], check=True, env=GIT_CLEAN_ENV)
    (repo / "src" / "mod0.py").write_text("VALUE = -1\n")
    return repo


def _start_hook(project: Path, env: dict[str, str]) -> Callable[[], float]:
    payload = _payload(project, "SessionStart", source="startup")
    return lambda: timed([sys.executable, "-P", "-m", "supervisor", "hook", "claude"],
                         cwd=project, env=env, stdin=payload)


def bench_session_start(tmp: Path, runs: int, concurrent: int = 40) -> list[tuple[str, str, str]]:
    """Issue 26: a SessionStart hook running the embedded default digest (no supervise.toml)
    on a small repository, against `python -c pass` and `git status --porcelain` run back to
    back (what any session start costs at least: an interpreter, and git looking at the tree);
    and ``concurrent`` such hooks on one project at once (an agent farm) against the same
    number of those pairs run at once, and against ``concurrent`` times one pair."""
    repo = small_repo(tmp)
    env = {**{k: v for k, v in NO_BYTECODE_ENV.items() if not k.startswith("GIT_")},
           "SUPERVISE_STATE_DIR": str(tmp / "start state")}
    proof = subprocess.run([sys.executable, "-P", "-m", "supervisor", "hook", "claude"], cwd=repo,
                           env=env, input=_payload(repo, "SessionStart", source="startup"),
                           capture_output=True, check=False)
    if b"## Instructions" not in proof.stdout or b"## Repository" not in proof.stdout:
        raise SystemExit(f"benchmark setup: the default digest printed {proof.stdout[-500:]!r}")
    pair_argv = ["/bin/sh", "-c", f"{sys.executable} -c pass && git -C '{repo}' status --porcelain"]
    hook_argv = [sys.executable, "-P", "-m", "supervisor", "hook", "claude"]
    payload = _payload(repo, "SessionStart", source="startup")

    def pair() -> float:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], env=env, check=False)
        subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], env=env,
                       stdout=subprocess.DEVNULL, check=False)
        return time.perf_counter() - t0

    def many(argv: list[str], stdin: bytes | None) -> float:
        t0 = time.perf_counter()
        procs = [subprocess.Popen(argv, cwd=repo, env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for _ in range(concurrent)]
        for proc in procs:
            proc.communicate(stdin or b"")
        return time.perf_counter() - t0

    got, cpu = interleaved_cpu({
        "pair": pair,
        "hook": _start_hook(repo, env),
        "pairs": lambda: many(pair_argv, None),
        "hooks": lambda: many(hook_argv, payload),
    }, runs)
    ms = lambda x: f"{x * 1000:.1f} ms"  # noqa: E731
    return [
        ("SessionStart hook, embedded default digest, small repo, vs `python -c pass` + "
         "`git status --porcelain` back to back (target <= 2.5x)",
         f"{ms(got['hook'])} vs {ms(got['pair'])} (CPU {ms(cpu['hook'])} vs {ms(cpu['pair'])})",
         f"{got['hook'] / got['pair']:.1f}x (CPU {cpu['hook'] / cpu['pair']:.1f}x)"),
        (f"{concurrent} such SessionStart hooks at once on one project vs {concurrent} x one "
         "pair (target <= 2.5x)",
         f"{got['hooks']:.2f} s vs {concurrent * got['pair']:.2f} s (CPU {cpu['hooks']:.2f} vs "
         f"{concurrent * cpu['pair']:.2f} s)",
         f"{got['hooks'] / (concurrent * got['pair']):.1f}x "
         f"(CPU {cpu['hooks'] / (concurrent * cpu['pair']):.1f}x)"),
        (f"the same {concurrent} hooks vs {concurrent} pairs at once (report)",
         f"{got['hooks']:.2f} s vs {got['pairs']:.2f} s (CPU {cpu['hooks']:.2f} vs "
         f"{cpu['pairs']:.2f} s)",
         f"{got['hooks'] / got['pairs']:.1f}x (CPU {cpu['hooks'] / cpu['pairs']:.1f}x)"),
    ]


def bench_streamed(tmp: Path, runs: int, mib: int = 1024, hook_mib: int = 128,
                   ) -> list[tuple[str, str, str]]:
    """Issue 26: output streamed, never built whole. ``supervise digest --format json`` with
    one stage printing ``mib`` MiB under a raised cap (wall against `cat` of the same bytes,
    peak RSS against the output kept), and a SessionStart hook whose one stage prints
    ``hook_mib`` MiB (the hook spills the digest to a file and prints a pointer: peak RSS
    against the output)."""
    size, hook_size = mib * 2**20, hook_mib * 2**20
    producer = f"yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c {size}"
    project, hooked = tmp / "json flood", tmp / "hook flood"
    for folder, nbytes in ((project, size), (hooked, hook_size)):
        folder.mkdir()
        subprocess.run(["git", "init", "-q", str(folder)], check=True, env=GIT_CLEAN_ENV)
        run = f"yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c {nbytes}"
        (folder / "supervise.toml").write_text(
            f"budget = 600\nmax_output = {2 * nbytes}\n[[stages]]\nname = \"flood\"\n"
            f"run = {json.dumps(run)}\nshell = true\nmax_output = {2 * nbytes}\n")
    env = {**NO_BYTECODE_ENV, "SUPERVISE_STATE_DIR": str(tmp / "stream state")}
    cat = ["/bin/sh", "-c", f"{producer} | cat"]
    peaks: dict[str, list[int]] = {"json": [], "hook": []}
    hook_payload = _payload(hooked, "SessionStart", source="startup")

    def peak_run(name: str, argv: list[str], cwd: Path | None = None,
                 stdin: bytes | None = None) -> float:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert proc.stdin is not None
        proc.stdin.write(stdin or b"")
        proc.stdin.close()
        peaks[name].append(peak_rss_until_exit(proc))
        proc.wait()
        return time.perf_counter() - t0

    proof = subprocess.run([sys.executable, "-P", "-m", "supervisor", "hook", "claude"],
                           cwd=hooked, env=env, input=hook_payload, capture_output=True,
                           check=False)
    if len(proof.stdout) > 64 << 10:
        raise SystemExit(f"benchmark setup: the hook printed {len(proof.stdout)} bytes inline")
    got = interleaved({
        "cat": lambda: timed(cat),
        "json": lambda: peak_run("json", [*SUPERVISE, "digest", "-C", str(project),
                                          "--format", "json"]),
        "hook": lambda: peak_run("hook", [sys.executable, "-P", "-m", "supervisor", "hook",
                                          "claude"], cwd=hooked, stdin=hook_payload),
    }, runs)
    json_peak, hook_peak = statistics.median(peaks["json"]), statistics.median(peaks["hook"])
    return [
        (f"{mib} MiB through `--format json` with a raised cap: wall vs `cat` (target <= 2x)",
         f"{got['json']:.2f} s vs {got['cat']:.2f} s", f"{got['json'] / got['cat']:.1f}x"),
        (f"{mib} MiB through `--format json` with a raised cap: peak RSS vs the output kept "
         "(target <= 1.5x)", f"{json_peak / 2**20:.0f} MiB vs {mib} MiB",
         f"{json_peak / size:.2f}x"),
        (f"SessionStart hook, one stage printing {hook_mib} MiB (spilled to a file): peak RSS "
         "vs the output (target <= 0.5x)", f"{hook_peak / 2**20:.0f} MiB vs {hook_mib} MiB; "
         f"wall {got['hook']:.2f} s", f"{hook_peak / hook_size:.2f}x"),
    ]


def bench_config_cache(tmp: Path, runs: int) -> list[tuple[str, str, str]]:
    """A SessionStart hook on one project used by two installations (two copies of the
    package, as a venv and a user install would be) in turn, against the same hook after a
    config-cache miss (its cache folder removed first: the plan is validated again, with
    pydantic) and a bare interpreter. With one cache slot per project the two installations
    evicted each other: every hook was a miss; the cache keeps an entry per installation."""
    installs = []
    for name in ("install a", "install b"):
        shutil.copytree(ROOT / "supervisor", tmp / name / "supervisor",
                        ignore=shutil.ignore_patterns("__pycache__"))
        installs.append(tmp / name)
    cache = tmp / "xdg cache"
    projects = []
    for name in ("cache project", "missed project"):
        project = tmp / name
        project.mkdir()
        subprocess.run(["git", "init", "-q", str(project)], check=True, env=GIT_CLEAN_ENV)
        (project / "supervise.toml").write_text("budget = 10\nstages = []\n")  # an empty digest
        projects.append(project)
    env = {**{k: v for k, v in NO_BYTECODE_ENV.items() if not k.startswith("GIT_")},
           "SUPERVISE_STATE_DIR": str(tmp / "cache state"), "XDG_CACHE_HOME": str(cache)}

    def hook(install: Path, project: Path) -> Callable[[], float]:
        payload = json.dumps({"session_id": "bench", "cwd": str(project), "source": "startup",
                              "hook_event_name": "SessionStart"}).encode()
        run_env = {**env, "PYTHONPATH": str(install)}
        return lambda: timed([*SUPERVISE, "hook", "claude"], cwd=project, env=run_env,
                             stdin=payload)

    first, second, missed = hook(installs[0], projects[0]), hook(installs[1], projects[0]), \
        hook(installs[0], projects[1])
    first(), second()  # both installations have used the project once
    kept = set((cache / "watchkeeper").iterdir())

    def miss() -> float:
        for folder in (cache / "watchkeeper").iterdir():
            if folder not in kept:  # the missed project's cache folder only
                shutil.rmtree(folder)
        return missed()

    got = interleaved({"python": lambda: timed([sys.executable, "-c", "pass"], env=env),
                       "a": first, "b": second, "miss": miss}, runs)
    files = sorted(p.name for folder in kept for p in folder.iterdir())
    turn = statistics.mean((got["a"], got["b"]))
    return [("SessionStart hook, two installations on one project in turn (each keeps its own "
             f"config-cache entry: {len(files)} files) vs the same hook after a config-cache miss",
             f"{turn * 1000:.1f} ms (a {got['a'] * 1000:.1f}, b {got['b'] * 1000:.1f}) vs "
             f"{got['miss'] * 1000:.1f} ms", f"{turn / got['miss']:.2f}x"),
            ("the same, in turn vs `python -c pass`",
             f"{turn * 1000:.1f} ms vs {got['python'] * 1000:.1f} ms",
             f"{turn / got['python']:.1f}x")]


def _peak_and_wall(argv: list[str], env: dict[str, str]) -> tuple[int, float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    peak = peak_rss_until_exit(proc)
    return peak, time.perf_counter() - t0


def bench_gib(tmp: Path, runs: int, mib: int = 1024) -> list[tuple[str, str, str]]:
    size = mib * 2**20
    producer = f"yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c {size}"
    raised, default = tmp / "raised", tmp / "default cap"
    for project, cap in ((raised, 2 * size), (default, None)):
        project.mkdir()
        cap_line = f"max_output = {cap}\n" if cap else ""
        (project / "supervise.toml").write_text(
            f"budget = 600\n{cap_line}[[stages]]\nname = \"flood\"\nrun = {json.dumps(producer)}\n"
            "shell = true\n" + (f"max_output = {cap}\n" if cap else ""))
    env = {**NO_BYTECODE_ENV, "SUPERVISE_STATE_DIR": str(tmp / "gib state")}
    cat = ["/bin/sh", "-c", f"{producer} | cat"]
    peaks: list[int] = []

    def raised_run() -> float:
        peak, wall = _peak_and_wall([*SUPERVISE, "digest", "-C", str(raised)], env)
        peaks.append(peak)
        return wall

    got = interleaved({
        "cat": lambda: timed(cat),
        "raised": raised_run,
        "default": lambda: timed([*SUPERVISE, "digest", "-C", str(default)], env=env),
    }, runs)
    peak = statistics.median(peaks)
    return [
        (f"{mib} MiB through a raised cap: peak RSS of `supervise digest` vs the output "
         "(target <= 1.5x)", f"{peak / 2**20:.0f} MiB vs {mib} MiB", f"{peak / size:.2f}x"),
        (f"{mib} MiB through a raised cap: wall vs `cat` (target <= 2x)",
         f"{got['raised']:.2f} s vs {got['cat']:.2f} s", f"{got['raised'] / got['cat']:.1f}x"),
        (f"{mib} MiB under the default 1 MiB cap: wall vs `cat` (target <= 1.2x)",
         f"{got['default']:.2f} s vs {got['cat']:.2f} s", f"{got['default'] / got['cat']:.2f}x"),
    ]


ASYNCIO_SCRIPT = """
import asyncio, sys
async def one(argv):
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True)
    await proc.communicate()
async def main(n, argv):
    await asyncio.gather(*(one(argv) for _ in range(n)))
asyncio.run(main(int(sys.argv[1]), sys.argv[2:]))
"""


def _cpu(argv: list[str], env: dict[str, str] | None = None) -> float:
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _stages_project(tmp: Path, name: str, count: int, cmd: str) -> Path:
    """A project of ``count`` stages running ``cmd``, ``max_parallel = 0``."""
    folder = tmp / name
    folder.mkdir()
    stages = "".join(f'[[stages]]\nname = "s{i}"\nrun = "{cmd}"\n' for i in range(count))
    # no stage at all is `stages = []`: a config without the key runs the default digest
    stages = stages or "stages = []\n"
    (folder / "supervise.toml").write_text(f"budget = 120\nmax_parallel = 0\n{stages}")
    return folder


def bench_many_stages(tmp: Path, runs: int, n: int = 500) -> list[tuple[str, str, str]]:
    sleepy = _stages_project(tmp, "sleep", n, "sleep 0.2")
    env = {**NO_BYTECODE_ENV, "SUPERVISE_STATE_DIR": str(tmp / "many state")}
    xargs = ["/bin/sh", "-c", f"seq {n} | xargs -P0 -I{{}} sleep 0.2"]
    got = interleaved({
        "xargs": lambda: timed(xargs),
        "ours": lambda: timed([*SUPERVISE, "digest", "-C", str(sleepy)], env=env),
    }, max(3, runs // 4))
    return [
        (f"{n} stages of `sleep 0.2`, max_parallel = 0, vs `xargs -P0` (target <= 2x)",
         f"{got['ours']:.2f} s vs {got['xargs']:.2f} s", f"{got['ours'] / got['xargs']:.1f}x"),
        *bench_stage_cpu(tmp, runs, n),
    ]


def bench_stage_cpu(tmp: Path, runs: int, n: int = 500) -> list[tuple[str, str, str]]:
    """CPU per extra stage: a digest of ``n`` stages of `true` minus a digest of none
    (`stages = []`), against the same difference for a plain asyncio script."""
    trues, empty = _stages_project(tmp, "true", n, "true"), _stages_project(tmp, "none", 0, "true")
    env = {**NO_BYTECODE_ENV, "SUPERVISE_STATE_DIR": str(tmp / "cpu state")}
    rounds = max(3, runs // 4)
    ours_cpu = statistics.median(
        (_cpu([*SUPERVISE, "digest", "-C", str(trues)], env) - _cpu([*SUPERVISE, "digest", "-C", str(empty)], env)) / n
        for _ in range(rounds))
    script = [sys.executable, "-c", ASYNCIO_SCRIPT]
    base_cpu = statistics.median(
        (_cpu([*script, str(n), "true"]) - _cpu([*script, "0", "true"])) / n for _ in range(rounds))
    return [
        ("CPU per extra stage (`true`) vs a plain asyncio script (target <= 1.2x)",
         f"{ours_cpu * 1000:.2f} ms vs {base_cpu * 1000:.2f} ms", f"{ours_cpu / base_cpu:.2f}x"),
    ]


def bench_run_vs_python(runs: int) -> list[tuple[str, str, str]]:
    """`supervise run -- true` (the lean path: posix_spawn and one wait, no engine) against a
    bare interpreter and GNU timeout, in the same rounds; and a command that leaves a
    background process behind (the sweep starts the watchdog) for what that path costs.
    Through the installed launcher (:data:`LAUNCHER`), as a user runs it."""
    true = shutil.which("true") or "/bin/true"
    env = {**NO_BYTECODE_ENV}
    supervise = [str(LAUNCHER)] if LAUNCHER.exists() else SUPERVISE
    cases: dict[str, Callable[[], float]] = {
        "python": lambda: timed([sys.executable, "-c", "pass"], env=env),
        "run": lambda: timed([*supervise, "run", "--", true], env=env),
        "sweep": lambda: timed([*supervise, "run", "--", "sh", "-c", "sleep 30 & exit 0"], env=env),
    }
    if shutil.which("timeout"):
        cases["timeout"] = lambda: timed(["timeout", "10", true], env=env)
    got, cpu = interleaved_cpu(cases, runs)
    rows = [("`supervise run -- true` vs `python -c pass` (target <= 1.3x)",
             f"{got['run'] * 1000:.1f} ms vs {got['python'] * 1000:.1f} ms (CPU "
             f"{cpu['run'] * 1000:.1f} vs {cpu['python'] * 1000:.1f} ms)",
             f"{got['run'] / got['python']:.1f}x (CPU {cpu['run'] / cpu['python']:.2f}x)")]
    if "timeout" in got:
        rows.append(("`supervise run -- true` vs `timeout 10 true`",
                     f"{got['run'] * 1000:.1f} ms vs {got['timeout'] * 1000:.1f} ms",
                     f"{got['run'] / got['timeout']:.1f}x"))
    rows.append(("`supervise run -- sh -c 'sleep 30 & exit 0'` (leftover swept) vs `python -c pass`",
                 f"{got['sweep'] * 1000:.1f} ms vs {got['python'] * 1000:.1f} ms",
                 f"{got['sweep'] / got['python']:.1f}x"))
    return rows


MCP_OPENING = b"".join(json.dumps(m).encode() + b"\n" for m in (
    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"}}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": 3, "method": "resources/list"}))
"""What a client sends first (Claude Code 2.1.332 counts a server ready once all is answered)."""


def _mcp_ready(project: Path, env: dict[str, str]) -> float:
    """Seconds from starting ``supervise mcp`` in ``project`` until it has answered
    :data:`MCP_OPENING` (the third answer read); the server then ends at end of input."""
    start = time.perf_counter()
    proc = subprocess.Popen([*SUPERVISE, "mcp"], cwd=project, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(MCP_OPENING)
    proc.stdin.flush()
    for _ in range(3):
        proc.stdout.readline()
    ready = time.perf_counter() - start
    proc.stdin.close()
    proc.stdout.read()
    proc.stdout.close()
    proc.wait()
    return ready


def bench_mcp_ready(tmp: Path, runs: int) -> list[tuple[str, str, str]]:
    """Issue 25: ``supervise mcp`` on a small repository (the embedded default digest) until a
    client counts it ready (``initialize`` with the digest, ``tools/list``, ``resources/list``
    answered), against ``python -c pass`` and against importing the MCP SDK alone (what the
    server waited for before answering, when it imported the SDK first)."""
    import importlib.util

    if importlib.util.find_spec("mcp") is None:
        return [("`supervise mcp` ready", "skipped: the MCP SDK is not installed", "")]
    project = small_repo(tmp, "mcp repo")
    env = {**NO_BYTECODE_ENV}
    cases: dict[str, Callable[[], float]] = {
        "python": lambda: timed([sys.executable, "-c", "pass"], env=env),
        "sdk": lambda: timed([sys.executable, "-c", "import mcp.server.stdio"], env=env),
        "ready": lambda: _mcp_ready(project, env),
    }
    got, cpu = interleaved_cpu(cases, runs)
    return [("`supervise mcp` ready (initialize with the default digest, both listings) vs "
             "`python -c pass`",
             f"{got['ready'] * 1000:.0f} ms vs {got['python'] * 1000:.1f} ms (CPU "
             f"{cpu['ready'] * 1000:.0f} vs {cpu['python'] * 1000:.1f} ms)",
             f"{got['ready'] / got['python']:.1f}x (CPU {cpu['ready'] / cpu['python']:.1f}x)"),
            ("`supervise mcp` ready vs importing the MCP SDK alone",
             f"{got['ready'] * 1000:.0f} ms vs {got['sdk'] * 1000:.0f} ms (CPU "
             f"{cpu['ready'] * 1000:.0f} vs {cpu['sdk'] * 1000:.0f} ms)",
             f"{got['ready'] / got['sdk']:.2f}x (CPU {cpu['ready'] / cpu['sdk']:.2f}x)")]


def bench_sanitize(runs: int) -> list[tuple[str, str, str]]:
    """Hidden-text removal (issue 11 item 8) against the decode every stage chunk already pays."""
    import timeit

    from supervisor._sanitize import StreamCleaner, clean

    plain = b"ordinary stage output, nothing hidden in it\n" * 24_000  # ~1 MiB
    text = plain.decode()
    dirty = text + "\x1b[0m"
    chunk = plain[:65536]
    cleaner = StreamCleaner()

    def best(fn: object) -> float:
        return min(timeit.repeat(fn, number=5, repeat=max(runs // 4, 3))) / 5  # type: ignore[arg-type]

    decode = best(lambda: plain.decode("utf-8"))
    fast = best(lambda: clean(text))
    slow = best(lambda: clean(dirty))
    emoji = "stage output in Unicode: naïve café, 日本語, \u2764\ufe0f\n" * 20_000  # ~1 MiB
    emoji_bytes = emoji.encode()
    emoji_decode = best(lambda: emoji_bytes.decode("utf-8"))
    selectors = best(lambda: clean(emoji))
    ascii_check = best(lambda: chunk.isascii())
    passed = best(lambda: cleaner.plain(chunk))
    return [
        ("`clean()` of 1 MiB plain ASCII vs its UTF-8 decode",
         f"{fast * 1000:.2f} ms vs {decode * 1000:.2f} ms", f"{fast / decode:.2f}x"),
        ("`clean()` of 1 MiB with one escape sequence at the end vs the decode",
         f"{slow * 1000:.2f} ms vs {decode * 1000:.2f} ms", f"{slow / decode:.2f}x"),
        ("per 64 KiB stage chunk: `StreamCleaner.plain` vs `bytes.isascii` (engine fast path)",
         f"{passed * 1e6:.1f} µs vs {ascii_check * 1e6:.1f} µs", f"{passed / ascii_check:.1f}x"),
        ("`clean()` of 1 MiB Unicode with a kept emoji selector (U+FE0F) on every line vs the decode",
         f"{selectors * 1000:.2f} ms vs {emoji_decode * 1000:.2f} ms",
         f"{selectors / emoji_decode:.2f}x"),
    ]


def bench_transcript(tmp: Path, runs: int) -> list[tuple[str, str, str]]:
    """Issue 12 item 6: a resume reads the transcript back to its last compaction. Worst case:
    31 MB of Claude transcript with no compaction (scanned whole) against reading and splitting
    the same bytes; usual case: a compaction near the end (one chunk read)."""
    import json
    import timeit

    from supervisor.session._transcript import session_contexts

    path = tmp / "transcript.jsonl"
    line = json.dumps({"type": "user", "message": {"role": "user", "content": "x" * 2000}}) + "\n"
    context = json.dumps({"type": "attachment", "attachment": {
        "type": "hook_additional_context", "content": ["D"], "hookEvent": "SessionStart"}}) + "\n"
    path.write_text(context + line * 15_000)
    recent = tmp / "recent.jsonl"
    recent.write_text(line * 15_000 + json.dumps({"type": "system", "subtype": "compact_boundary"})
                      + "\n" + context)

    def baseline() -> None:
        data = path.read_bytes()
        sum(1 for ln in data.split(b"\n") if b"compact_boundary" in ln or b"hook_additional_context" in ln)

    def best(fn: object) -> float:
        return min(timeit.repeat(fn, number=1, repeat=max(runs // 3, 3)))  # type: ignore[arg-type]

    base = best(baseline)
    whole = best(lambda: session_contexts(path, "claude"))
    near = best(lambda: session_contexts(recent, "claude"))
    return [
        ("resume transcript check, 31 MB without a compaction vs read + split + two byte scans",
         f"{whole * 1000:.0f} ms vs {base * 1000:.0f} ms", f"{whole / base:.2f}x"),
        ("resume transcript check, 31 MB with a compaction at the end vs the same baseline",
         f"{near * 1000:.2f} ms vs {base * 1000:.0f} ms", f"{near / base:.4f}x"),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--only", choices=("start", "stream", "cost", "hooks", "digest", "engine",
                                           "run", "cache", "stress", "state", "mcp"),
                        help="only the rows of issue 13 (cost; hooks: its per-event and "
                        "session-start hook rows alone; digest: its large-repository digest row "
                        "alone; engine: its 1 GiB and many-stage rows alone; run: its "
                        "`supervise run` rows; cache: its config-cache row), issue 26 (start: "
                        "session starts, the large-repository digest, `supervise run` and the "
                        "per-stage CPU; stream: the large outputs through --format json and the "
                        "hook), issue 25 (mcp: the MCP server's start until a client counts it "
                        "ready), issue 10 (stress) or issue 11 (state)")
    parser.add_argument("--gib", type=int, default=1024, help="MiB for the large-output rows")
    args = parser.parse_args()
    runs = 5 if args.quick else 15
    rows: list[tuple[str, str, str]] = []
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        if args.only == "start":
            rows += bench_session_start(tmp, runs)
            rows += bench_large_repo_digest(tmp, runs)
            rows += bench_run_vs_python(runs)
            rows += bench_stage_cpu(tmp, runs)
            _print(rows, runs, load)
            return 0
        if args.only == "stream":
            _print(bench_streamed(tmp, 3, args.gib), 3, load)
            return 0
        if args.only == "state":
            _print(bench_planted_state(tmp, runs), runs, load)
            return 0
        if args.only == "run":
            _print(bench_run_vs_python(runs), runs, load)
            return 0
        if args.only == "mcp":
            _print(bench_mcp_ready(tmp, runs), runs, load)
            return 0
        if args.only == "cache":
            _print(bench_config_cache(tmp, runs), runs, load)
            return 0
        if args.only == "stress":
            rows += bench_stress(tmp, max(3, runs // 3))
            _print(rows, max(3, runs // 3), load)
            return 0
        if args.only == "digest":
            _print(bench_large_repo_digest(tmp, runs), max(3, runs // 2), load)
            return 0
        if args.only == "engine":
            rows += bench_gib(tmp, 3, args.gib)
            rows += bench_many_stages(tmp, runs)
            _print(rows, runs, load)
            return 0
        rows += bench_event_hooks(tmp, runs)
        if args.only == "hooks":
            _print(rows, runs, load)
            return 0
        rows += bench_session_start(tmp, runs)
        rows += bench_large_repo_digest(tmp, runs)
        rows += bench_gib(tmp, 3, args.gib)
        rows += bench_streamed(tmp, 3, args.gib)
        rows += bench_many_stages(tmp, runs)
        rows += bench_run_vs_python(runs)
        rows += bench_config_cache(tmp, runs)
        if args.only == "cost":
            _print(rows, runs, load)
            return 0
        rows += bench_run_overhead(runs)
        rows.append(bench_parallel(tmp, runs))
        rows += bench_overrun(tmp)
        rows.append(bench_rss(tmp, 200))
        rows.append(bench_hook(tmp, runs))
        rows += bench_sanitize(runs)
        rows += bench_transcript(tmp, runs)
        rows += bench_mcp_ready(tmp, runs)
        rows += bench_stress(tmp, max(3, runs // 3))
        rows += bench_planted_state(tmp, runs)
    _print(rows, runs, load)
    return 0


def _print(rows: list[tuple[str, str, str]], runs: int, load: tuple[float, float, float]) -> None:
    print(f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {os.cpu_count()} cores, "
          f"Python {sys.version.split()[0]}, medians of {runs} runs; load average at the start "
          f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}, at the end "
          + " / ".join(f"{x:.1f}" for x in os.getloadavg()) + ".\n")
    print("| measurement | figures | ratio |\n|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    sys.exit(main())
