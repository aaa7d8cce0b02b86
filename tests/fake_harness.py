"""A fake harness ancestor for session-protocol tests.

The harness matcher looks at a process's *own* name (``/proc/<pid>/comm``, from the file it
executed), so a symlink is not enough: we copy a real shell binary to ``<tmp>/<name>`` and
run that. The fake harness is a long-lived shell reading commands from a pipe (so it stays
alive, as a real harness does, between two hook events); each command runs the real CLI
several levels below it::

    claude (copied dash, -s)  ->  [claude ...]  ->  sh -c '...; :'  ->  sh run.sh  ->  python -m supervisor hook

Readiness and completion are handshakes (a ``done <n>`` line), never sleeps.
"""

from __future__ import annotations

from collections.abc import Callable

import itertools
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

_SHELL = shutil.which("dash") or "/bin/sh"


def harness_binary(bindir: Path, name: str) -> Path:
    """A real copy (not a link) of a shell binary named ``name`` inside ``bindir``."""
    bindir.mkdir(parents=True, exist_ok=True)
    target = bindir / name
    if not target.exists():
        shutil.copy2(os.path.realpath(_SHELL), target)
    return target


@dataclass(frozen=True)
class HookRun:
    """The result of one CLI run below the fake harness (bytes, exit status)."""

    returncode: int
    stdout: bytes
    stderr: bytes

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")


class FakeHarness:
    """A live process named ``name`` (``nest`` copies deep) that runs CLI commands on request.

    Args:
        workdir: a private scratch dir for binaries, scripts and outputs.
        name: the harness process name (``claude``, ``codex``, ``pi``...).
        nest: how many contiguous processes carry that name (Claude runs hooks from
            ``claude`` helpers below the main ``claude``); the outermost is the real owner.
        env: extra environment for the harness and everything below it.
        inner: names of further processes between the harness and the CLI (outermost first),
            e.g. ``("pi",)`` for a Pi running below a Codex.
        helper_session: with ``nest > 1``, the ``CLAUDE_CODE_SESSION_ID`` the inner copies
            carry, as Claude's helper processes carry their session's id (the owner walk
            climbs through them); None: the inner copies are separate sessions below a host.
    """

    _ids = itertools.count()

    def __init__(self, workdir: Path, name: str = "claude", nest: int = 1,
                 env: dict[str, str] | None = None, inner: tuple[str, ...] = (),
                 helper_session: str | None = None) -> None:
        self.workdir = workdir / f"h{next(self._ids)}-{name}"
        self.workdir.mkdir(parents=True)
        binary = harness_binary(workdir / "bin", name)
        self._count = itertools.count()
        full_env = {**os.environ, **(env or {})}
        self.proc = subprocess.Popen([str(binary), "-s"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     cwd=self.workdir, env=full_env)
        copy = [str(binary)] if helper_session is None else [
            "env", f"CLAUDE_CODE_SESSION_ID={helper_session}", str(binary)]
        self._inner = [copy] * (nest - 1) + [[str(harness_binary(workdir / "bin", n))]
                                             for n in inner]
        self.inner_pids: list[int] = []
        # Handshake: the shell is up and has its own name.
        self._send("echo ready $$")
        line = self._readline()
        assert line.startswith("ready"), line

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command.encode() + b"\n")
        self.proc.stdin.flush()

    def _readline(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().decode().strip()

    def start(self, args: list[str], *, cwd: Path, stdin: bytes | str | None = b"",
              env: dict[str, str] | None = None) -> int:
        """Start ``supervise ARGS`` below the harness (do not wait); returns a run number.

        ``stdin=None`` closes the CLI's stdin; ``"inherit"`` gives it the harness's own
        command pipe (a pipe nobody closes); bytes are fed from a file.
        """
        n = next(self._count)
        base = self.workdir / f"run{n}"
        if stdin is None:
            redirect = "<&-"
        elif stdin == "inherit":
            redirect = ""
        else:
            assert isinstance(stdin, bytes)
            (base.with_suffix(".in")).write_bytes(stdin)
            redirect = f"< {shlex.quote(str(base.with_suffix('.in')))}"
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in (env or {}).items())
        cli = shlex.join([sys.executable, "-m", "supervisor", *args])
        script = (f"cd {shlex.quote(str(cwd))}\n{exports}"
                  f"{cli} {redirect} > {shlex.quote(str(base))}.out 2> {shlex.quote(str(base))}.err\n"
                  f"echo $? > {shlex.quote(str(base))}.rc\n")
        base.with_suffix(".sh").write_text(script)
        inner = shlex.join([_SHELL, "-c", f"{_SHELL} {shlex.quote(str(base))}.sh; :"])
        for binary in reversed(self._inner):
            inner = shlex.join([*binary, "-c", f"{inner}; :"])
        self._send(f"{inner}; echo done {n}")
        return n

    def wait(self, n: int) -> HookRun:
        """Wait for run ``n``'s handshake line and return its result."""
        line = self._readline()
        assert line == f"done {n}", f"fake harness said {line!r}, expected 'done {n}'"
        base = self.workdir / f"run{n}"
        return HookRun(int((base.with_suffix(".rc")).read_text().strip() or "-1"),
                       (base.with_suffix(".out")).read_bytes(), (base.with_suffix(".err")).read_bytes())

    def run(self, args: list[str], *, cwd: Path, stdin: bytes | str | None = b"",
            env: dict[str, str] | None = None) -> HookRun:
        """Run ``supervise ARGS`` below the harness and wait for it."""
        return self.wait(self.start(args, cwd=cwd, stdin=stdin, env=env))

    def close(self) -> None:
        """End the harness (EOF on its command pipe) and reap it."""
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> FakeHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


Harnesses = Callable[..., FakeHarness]
"""The ``harnesses`` fixture (tests/conftest.py): ``make(name="claude", **options)`` starts one
fake harness process, closed after the test."""
