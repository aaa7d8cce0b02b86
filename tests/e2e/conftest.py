"""End-to-end fixtures: the real harness CLIs against the project's fake model server.

The CLIs are pinned and installed by ``scripts/install-harnesses.sh`` into ``.cache/harnesses``
(``HARNESS_CACHE`` overrides). The first e2e test of a run installs them (npm registry only,
idempotent; about 2.6 GB and a minute or more the first time, with its progress shown on the
terminal; ``WATCHKEEPER_NO_HARNESS_INSTALL=1`` turns that off);
a test whose CLI is still missing (no npm) skips and says why, except under CI (``CI`` set and
not empty/0/false, as ``scripts/install-harnesses.sh`` reads it), where it fails: a green CI
run always drove the real CLIs.
Every test gets its own fake model server on 127.0.0.1 (a free port) that logs each request
body; a test passes only when the text our hook printed is found in a request the model got.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("HARNESS_CACHE") or ROOT / ".cache" / "harnesses")
SERVER = Path(__file__).with_name("fake_model_server.py")
RUN_TIMEOUT = 120.0
"""Seconds one harness CLI invocation may take before the test fails (a turn takes ~1-3 s)."""
TEST_TIMEOUT = 300.0
"""Seconds one end-to-end test may take (pytest-timeout; the unit tests keep the global 60 s).
A test starts one to five Node CLIs (each bounded by :data:`RUN_TIMEOUT`) and a fake model
server: 3-5 s of CPU, 20-75 s of wall time on a loaded 2-core host (measured 2026-11-30, load
15-20), where the global 60 s failed 2 of 11 Pi tests in one run and 2 of 3 runs of
``test_matrix_a_continue_then_compact_adds_no_second_digest``. A module may set its own."""

# Variables of an enclosing agent session or a real account must not leak into the CLIs.
_FOREIGN_PREFIXES = ("CLAUDE", "ANTHROPIC", "CODEX", "OPENAI", "GEMINI", "GOOGLE", "QWEN",
                     "CURSOR", "GROK", "SUPERVISE_", "NO_MISTAKES")


_INSTALL_TRIED: list[str] = []


def _ensure_installed(config: pytest.Config | None = None) -> None:
    """Run the project's installer once per test run (so the README's test command needs no
    separate set-up step); its last lines are kept for the skip message. With ``config``
    (before the first test) its progress is shown on the terminal as it goes: a first install
    downloads about 2.6 GB."""
    import contextlib
    import threading

    if _INSTALL_TRIED or os.environ.get("WATCHKEEPER_NO_HARNESS_INSTALL"):
        return
    capman = config.pluginmanager.getplugin("capturemanager") if config is not None else None
    shown = capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()
    try:
        with shown:
            proc = subprocess.Popen(["bash", str(ROOT / "scripts" / "install-harnesses.sh")],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    stdin=subprocess.DEVNULL)
            timer = threading.Timer(900, proc.kill)  # bounded: a hung npm ends the wait
            timer.start()
            lines = []
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    lines.append(line)
                    if capman is not None:
                        sys.stderr.write(line)
                        sys.stderr.flush()
                proc.wait()
            finally:
                timer.cancel()
                if proc.stdout is not None:
                    proc.stdout.close()  # else an unclosed pipe errors the first test
        _INSTALL_TRIED.append("".join(lines).strip()[-300:])
    except OSError as err:
        _INSTALL_TRIED.append(f"installer failed: {err}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every e2e test without its own ``timeout`` mark gets :data:`TEST_TIMEOUT`."""
    for item in items:
        if item.get_closest_marker("e2e") and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TEST_TIMEOUT))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Install the pinned CLIs before the first test when any e2e test is selected: outside
    every test's timeout, and not at all for a unit-test-only run."""
    if any(item.get_closest_marker("e2e") for item in session.items):
        _ensure_installed(session.config)


def in_ci() -> bool:
    """Whether this run is CI's (``CI`` set and not empty, 0, false or no): missing CLIs fail
    the e2e tests there instead of skipping them (``.ci/run`` exports ``CI=true``)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def harness_bin(name: str, floor: bool = False) -> Path:
    """Path of an installed harness CLI (installing the pinned CLIs on first use); skips the
    test when it cannot be installed, or fails it under CI (:func:`in_ci`). ``floor``: the
    harness table's supported floor version, from the second pinned set (``<cache>/floor``)
    when it differs from the newest pin."""
    from supervisor._harnesses import BY_NAME

    row = BY_NAME[name]
    below = CACHE / "floor" if floor and row.floor and row.floor != row.newest else CACHE
    path = below / "node_modules" / ".bin" / name
    if not path.exists():
        _ensure_installed()
    if not path.exists():
        why = f"{name} CLI not installed in {CACHE}: run `bash scripts/install-harnesses.sh` (needs npm)"
        if in_ci():
            pytest.fail(f"{why}; under CI the end-to-end tests never skip", pytrace=False)
        pytest.skip(why)
    return path


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without foreign agent/model variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN_PREFIXES)}
    env.update(extra)
    return env


@dataclass
class FakeModel:
    """A running fake model server: its URL, request log and one-shot usage file."""

    port: int
    log: Path
    tokens_file: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def requests(self) -> list[dict]:
        """Every logged request (method, path, headers, body), oldest first."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text("utf-8").splitlines() if line.strip()]

    def count(self) -> int:
        """How many requests were logged so far (a cursor for :meth:`bodies`)."""
        return len(self.requests())

    def bodies(self, since: int = 0) -> list[str]:
        """Request bodies as JSON text (escapes decoded), from request number ``since`` on."""
        return [json.dumps(r.get("body"), ensure_ascii=False) for r in self.requests()[since:]]

    def seen(self, needle: str, since: int = 0) -> bool:
        """True when ``needle`` is in a request body logged at or after ``since``."""
        return any(needle in body for body in self.bodies(since))

    def report_tokens_once(self, n: int) -> None:
        """The next reply reports ``n`` input tokens (provokes auto-compaction once)."""
        self.tokens_file.write_text(str(n))


@pytest.fixture
def fake_model(tmp_path: Path) -> Iterator[FakeModel]:
    """Start the fake model server on a free port; stop it (by its own pid) afterwards."""
    log = tmp_path / "requests.jsonl"
    tokens = tmp_path / "tokens-once"
    proc = subprocess.Popen([sys.executable, str(SERVER), "--port", "0", "--log", str(log),
                             "--tokens-once-file", str(tokens)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                            text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "fake model server on http://127.0.0.1:PORT ..." or EOF
        if "127.0.0.1:" not in line:
            pytest.fail(f"fake model server did not start: {line!r}")
        port = int(line.split("127.0.0.1:")[1].split()[0])
        yield FakeModel(port, log, tokens)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


@dataclass
class Project:
    """A git repo with a ``supervise.toml`` whose stage prints a unique marker."""

    path: Path
    mark: str

    def configure(self, toml: str) -> None:
        (self.path / "supervise.toml").write_text(textwrap.dedent(toml))

    def install(self, *harnesses: str) -> None:
        proc = subprocess.run([sys.executable, "-m", "supervisor", "install", *harnesses], cwd=self.path,
                              capture_output=True, timeout=60, stdin=subprocess.DEVNULL, env=clean_env())
        assert proc.returncode == 0, proc.stderr.decode()


def marker_toml(mark: str, budget: float = 20, extra: str = "") -> str:
    """A digest of one ``reemit`` stage printing ``MARK-<source>-<mode>``, plus ``extra``."""
    return (f"budget = {budget}\ngrace = 0.5\n\n[[stages]]\nname = \"mark\"\nreemit = true\n"
            f"run = [\"sh\", \"-c\", \"echo {mark}-$SUPERVISE_SOURCE-$SUPERVISE_MODE\"]\n{extra}")


@pytest.fixture
def project(tmp_path: Path) -> Project:
    """A fresh git repo (one commit) with the marker digest configured."""
    path = tmp_path / "proj"
    path.mkdir()
    env = clean_env()
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True, env=env)
    (path / "README.md").write_text("e2e project\n")
    subprocess.run(["git", "-C", str(path), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "commit", "-q", "-m", "initial"], check=True, env=env)
    mark = f"E2EMARK{uuid.uuid4().hex[:10]}"
    proj = Project(path, mark)
    proj.configure(marker_toml(mark))
    return proj


def run_harness(argv: list[str | os.PathLike[str]], cwd: Path, env: dict[str, str],
                timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """Run one harness CLI invocation to its end (stdin closed), output captured as text."""
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def tui_session(argv: list[str | os.PathLike[str]], cwd: Path, env: dict[str, str],
                fake_model: FakeModel, prompts: list[str | int], *, ready: bytes,
                startup: Callable[[], None] = lambda: None) -> None:
    """One interactive harness process on a pseudo-terminal (40 x 120): ``startup()`` once
    the process runs, then each prompt typed and sent (Enter) once ``ready`` (the empty
    input box's text) is on the screen again, the next one once the fake model got a
    request holding that prompt and the log has been quiet for 3 s; an int instead of a
    prompt makes the next reply report that many input tokens. The process group (the
    child leads its own session) is killed by its pid when the prompts are done."""
    import fcntl
    import pty
    import re
    import select
    import signal
    import struct
    import termios
    import threading

    # A person's terminal: no CI markers, which ink-based TUIs (Gemini's is-in-ci check:
    # CI, CONTINUOUS_INTEGRATION, CI_*) take as "not interactive", drawing no input box.
    tty_env = {k: v for k, v in env.items()
               if k not in ("CI", "CONTINUOUS_INTEGRATION") and not k.startswith("CI_")}
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.chdir(cwd)
        os.execve(str(argv[0]), [str(a) for a in argv], {**tty_env, "TERM": "xterm-256color"})
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    done, shown = threading.Event(), threading.Event()
    screen: list[bytes] = []

    def drain() -> None:  # the TUI blocks once the terminal's buffer is full: keep reading
        while not done.is_set():
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                screen.append(chunk)
                del screen[:-64]
                if ready in b"".join(screen[-2:]):
                    shown.set()

    def tail() -> bytes:
        return re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]", b"", b"".join(screen))[-1500:]

    def settle(before: int, text: str) -> None:
        deadline = time.monotonic() + RUN_TIMEOUT
        while not any(text in b for b in fake_model.bodies(before)):
            if time.monotonic() > deadline:
                pytest.fail(f"{argv[0]} (TUI): the prompt {text!r} never reached the model; "
                            f"the screen's end: {tail()!r}")
            time.sleep(0.3)
        count, quiet = fake_model.count(), time.monotonic()
        while time.monotonic() - quiet < 3.0 and time.monotonic() < deadline:
            time.sleep(0.3)
            if fake_model.count() != count:
                count, quiet = fake_model.count(), time.monotonic()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        startup()
        for prompt in prompts:
            if isinstance(prompt, int):
                fake_model.report_tokens_once(prompt)
                continue
            if not shown.wait(RUN_TIMEOUT):  # keys typed before the box is up are lost
                pytest.fail(f"{argv[0]} (TUI): no input box; the screen's end: {tail()!r}")
            time.sleep(1.0)
            shown.clear()
            before = fake_model.count()
            os.write(fd, prompt.encode())
            time.sleep(0.5)
            os.write(fd, b"\r")
            settle(before, prompt)
    finally:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
        done.set()
        reader.join(timeout=5)
        os.close(fd)


NUDGE = "SUPERVISE_OP: v1 session-start"
REEMIT_HEAD = "CONTEXT RE-EMIT after"


def matrix_toml(mark: str) -> str:
    """The context-fidelity matrix digest: the ``reemit`` marker stage, plus a stage that is
    NOT re-emitted printing ``FULLONLY-<mark>-<source>``, so a request can tell a re-emit
    (marker, no FULLONLY) from a full digest (both)."""
    return marker_toml(mark, extra=(
        '\n[[stages]]\nname = "fullonly"\n'
        f'run = ["sh", "-c", "echo FULLONLY-{mark}-$SUPERVISE_SOURCE"]\n'))


def tally(body: str, mark: str) -> dict[str, int]:
    """Markers in one request body: full digests (``full``), re-emits (``reemit``: the
    labelled head), the re-emitted marker after a compaction (``reemit_mark``), nudges."""
    return {"full": body.count(f"FULLONLY-{mark}"), "reemit": body.count(REEMIT_HEAD),
            "reemit_mark": body.count(f"{mark}-compact-reemit"), "nudge": body.count(NUDGE)}
