"""What a user meets at the edges of the CLI: a signal during the start, output that cannot be
written, closed standard descriptors. Every verb ends with a status and at most one line on
stderr, never a traceback (issues 10 and 14; docs/cli.md, "Exit codes")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import supervise_cmd

STOP = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

TERMINAL_VERBS = [
    ["digest"],
    ["digest", "--format", "json"],
    ["status"],
    ["config"],
    ["doctor"],
    ["install", "--help"],
    ["run", "--", "sleep", "5"],
]

QUIET_CONFIG = '[[stages]]\nname = "a"\nrun = ["sleep", "3"]\n[[stages]]\nname = "b"\nrun = ["echo", "hi"]\n'


def _blocked() -> None:
    """In the child, before exec: hold TERM, INT and HUP pending (a signal sent while the
    interpreter starts waits for our handlers, which unblock them; without that they would
    stay pending and the verb would run to its end)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP)


def _no_traceback(err: bytes) -> None:
    text = err.decode(errors="replace")
    assert "Traceback" not in text and "Exception" not in text and "Warning" not in text, text
    assert "internal error" not in text, text


def _signal_over_the_start(argv: list[str], cwd: Path, sig: int, moments: int) -> list[int]:
    """Start ``argv`` ``moments`` times and send ``sig`` at 0, 10, 20, ... ms; return the exit
    statuses, after checking stderr each time.

    Once the verb is done, the interpreter shuts down: a signal then is either never handled
    (status 0: the work was complete) or, after it restored the default handlers, a death by
    the signal (``-sig``, which a shell shows as 128 + n); both quiet. The first signal is
    sent while the new process still holds it blocked, so it always lands in the start: its
    status must be the quiet 128 + n (0 for a harness-facing verb)."""
    codes = []
    for i in range(moments):
        proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, preexec_fn=_blocked)
        time.sleep(i * 0.01)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=50)
        _no_traceback(err)
        assert len(err.decode(errors="replace").splitlines()) <= 1, err
        codes.append(proc.returncode)
    return codes


@pytest.mark.timeout(180)
@pytest.mark.parametrize("verb", TERMINAL_VERBS, ids=lambda v: "-".join(v[:2]))
def test_ctrl_c_at_any_moment_of_the_start_exits_130_quietly(git_repo: Path, verb: list[str],
                                                              cpu_load: str) -> None:
    """Ctrl-C in the first ~40 ms (Python still importing) printed a KeyboardInterrupt
    traceback. Sent at 12 moments over the start, it ends every terminal verb with 130 and
    nothing but at most one line on stderr."""
    (git_repo / "supervise.toml").write_text(QUIET_CONFIG)
    codes = _signal_over_the_start(supervise_cmd(*verb), git_repo, signal.SIGINT, 12)
    assert set(codes) <= {130, -signal.SIGINT, 0} and codes[0] == 130, codes


@pytest.mark.timeout(180)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
@pytest.mark.parametrize("verb", [["digest"], ["status"], ["config"]], ids=lambda v: v[0])
def test_term_or_hup_at_any_moment_ends_a_terminal_verb_with_128_plus_n(
        git_repo: Path, verb: list[str], sig: signal.Signals) -> None:
    (git_repo / "supervise.toml").write_text(QUIET_CONFIG)
    codes = _signal_over_the_start(supervise_cmd(*verb), git_repo, sig, 10)
    assert set(codes) <= {128 + sig, -sig, 0} and codes[0] == 128 + sig, codes


@pytest.mark.timeout(180)
@pytest.mark.parametrize("verb", [["hook", "claude"], ["nudge", "claude"],
                                  ["bridge", "--harness", "pi", "--source", "startup"]],
                         ids=lambda v: v[0])
def test_a_signal_at_any_moment_ends_a_harness_facing_verb_with_0(git_repo: Path,
                                                                  verb: list[str]) -> None:
    (git_repo / "supervise.toml").write_text(QUIET_CONFIG)
    for sig in (signal.SIGINT, signal.SIGTERM):
        codes = _signal_over_the_start(supervise_cmd(*verb), git_repo, sig, 8)
        assert set(codes) <= {0, -sig} and codes[0] == 0, (sig, codes)


def test_the_console_script_is_quiet_on_an_early_ctrl_c_too(git_repo: Path) -> None:
    """The installed ``supervise`` (our launcher, ``bin/supervise``, imports
    ``supervisor._main``) goes through the same entry as ``python -m supervisor``."""
    script = Path(sys.executable).with_name("supervise")
    if not script.exists():
        pytest.skip("no `supervise` next to this interpreter (not an installed venv)")
    (git_repo / "supervise.toml").write_text(QUIET_CONFIG)
    codes = _signal_over_the_start([str(script), "digest"], git_repo, signal.SIGINT, 8)
    assert set(codes) <= {130, -signal.SIGINT, 0} and codes[0] == 130, codes


# --- output that could not be written -------------------------------------------------------

PRINTING_VERBS = [
    (["digest"], 1),
    (["digest", "--format", "json"], 1),
    (["status"], 1),
    (["status", "--format", "json"], 1),
    (["config"], 1),
    (["config", "--default"], 1),
    (["install", "--help"], 1),
    (["--help"], 1),
    (["--version"], 1),
    (["run", "--format", "json", "--", "true"], 125),
]


def _ids(case: tuple[list[str], int]) -> str:
    return "-".join(case[0][:2]).lstrip("-")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("case", PRINTING_VERBS, ids=_ids)
def test_output_to_a_full_device_is_a_failure_in_one_line(git_repo: Path,
                                                           case: tuple[list[str], int]) -> None:
    """``supervise digest > /dev/full`` exited 0 and said nothing; ``status``/``config`` said
    "internal error: OSError" (exit 3)."""
    verb, expected = case
    (git_repo / "supervise.toml").write_text('[[stages]]\nname = "b"\nrun = ["echo", "hi"]\n')
    with open("/dev/full", "wb") as full:
        proc = subprocess.run(supervise_cmd(*verb), cwd=git_repo, stdin=subprocess.DEVNULL,
                              stdout=full, stderr=subprocess.PIPE, timeout=60)
    lines = proc.stderr.decode().splitlines()
    assert proc.returncode == expected, lines
    assert len(lines) == 1 and "output not written" in lines[0] and "ENOSPC" in lines[0], lines


def test_doctor_to_a_full_device_says_so_and_fails(git_repo: Path) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with open("/dev/full", "wb") as full:
        proc = subprocess.run(supervise_cmd("doctor"), cwd=git_repo, stdin=subprocess.DEVNULL,
                              stdout=full, stderr=subprocess.PIPE, timeout=60)
    assert proc.returncode != 0
    assert b"output not written" in proc.stderr and b"Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("case", PRINTING_VERBS + [(["doctor"], 1)], ids=_ids)
def test_a_reader_that_left_is_not_an_error(git_repo: Path, case: tuple[list[str], int]) -> None:
    """``supervise config | head -1``: the reader is gone before we write (``EPIPE``); the
    exit status is what it would have been, nothing is said."""
    verb, _ = case
    (git_repo / "supervise.toml").write_text('[[stages]]\nname = "b"\nrun = ["echo", "hi"]\n')
    with open(os.devnull, "wb") as sink:
        whole = subprocess.run(supervise_cmd(*verb), cwd=git_repo, stdin=subprocess.DEVNULL,
                               stdout=sink, stderr=subprocess.PIPE, timeout=60)
    read, write = os.pipe()
    os.close(read)  # the reader left before the first byte
    try:
        proc = subprocess.run(supervise_cmd(*verb), cwd=git_repo, stdin=subprocess.DEVNULL,
                              stdout=write, stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(write)
    assert proc.returncode == whole.returncode, proc.stderr
    assert b"output not written" not in proc.stderr and b"Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("case", PRINTING_VERBS, ids=_ids)
def test_stdout_closed_at_start_is_a_failure_in_one_line(git_repo: Path,
                                                         case: tuple[list[str], int]) -> None:
    """``supervise status >&-``: everything went to /dev/null, silently, with status 0."""
    verb, expected = case
    (git_repo / "supervise.toml").write_text('[[stages]]\nname = "b"\nrun = ["echo", "hi"]\n')
    proc = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", *supervise_cmd(*verb)],
                          cwd=git_repo, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          timeout=60)
    lines = proc.stderr.decode().splitlines()
    assert proc.returncode == expected, lines
    assert len(lines) == 1 and "stdout was closed" in lines[0], lines


@pytest.mark.parametrize("redirect", ["2>&-", "2>/dev/full", "<&-"])
@pytest.mark.parametrize("verb", [["digest"], ["status"], ["config"], ["doctor"], ["nosuchverb"],
                                  ["digest", "--budget", "x"], ["config", "-C", "no-such-dir"],
                                  ["hook", "claude", "--bogus"], ["run", "--", "true"]],
                         ids=lambda v: "-".join(v[:2]))
def test_closed_or_full_stderr_and_closed_stdin_change_nothing(git_repo: Path, verb: list[str],
                                                               redirect: str) -> None:
    """A diagnostic that cannot be written is dropped: the status is the one the verb gives
    with a working stderr, never a crash in the error path."""
    if "full" in redirect and not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    (git_repo / "supervise.toml").write_text('[[stages]]\nname = "b"\nrun = ["echo", "hi"]\n')
    normal = subprocess.run(supervise_cmd(*verb), cwd=git_repo, stdin=subprocess.DEVNULL,
                            capture_output=True, timeout=60)
    proc = subprocess.run(["sh", "-c", f'exec "$@" {redirect}', "sh", *supervise_cmd(*verb)],
                          cwd=git_repo, stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=60)
    assert proc.returncode == normal.returncode, (proc.stdout[-500:], proc.stderr[-500:])
    _no_traceback(proc.stderr)


# --- small bad inputs -------------------------------------------------------------------------

@pytest.mark.parametrize("verb", [["hook", "claude"], ["nudge", "claude"], ["status"], ["config"],
                                  ["digest"], ["doctor"], ["install"], ["uninstall"], ["run"],
                                  ["bridge", "--harness", "pi"]], ids=lambda v: v[0])
def test_a_huge_argv_is_one_short_error(git_repo: Path, verb: list[str]) -> None:
    """100,000 stray arguments: the hook printed 100,000 lines (and took seconds to parse
    them), the terminal verbs a 200 KB "unrecognized arguments" line."""
    proc = subprocess.run(supervise_cmd(*verb, *["a"] * 100_000), cwd=git_repo,
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
                          env={**os.environ, "SUPERVISE_OFF": "1"})
    _no_traceback(proc.stderr)
    lines = [line for line in proc.stderr.decode().splitlines() if not line.startswith(" ")]
    assert all(len(line) <= 400 for line in lines), [len(line) for line in lines]
    assert len([line for line in lines if not line.startswith("usage:")]) <= 1, lines[:5]


@pytest.mark.parametrize("argv", [["run", "--", "\x1b]0;owned\x07"],
                                  ["digest", "--only", "\x1b[8mhidden"],
                                  ["status", "\x1b[31mred"],
                                  ["config", "-C", "\x1b[2Jgone"],
                                  ["install", "\x1b[31m"],
                                  ["hook", "claude", "\x1b]0;x\x07", "--event", "\x1b[31m"]],
                         ids=lambda a: a[0])
def test_escape_sequences_in_arguments_never_reach_the_terminal(git_repo: Path,
                                                                argv: list[str]) -> None:
    """A mistyped or pasted argument is echoed in the error: as escapes, never as a title
    change, a cleared screen or concealed text."""
    off = {"SUPERVISE_OFF": "1"} if argv[0] == "hook" else {}  # the hook: no digest needed
    proc = subprocess.run(supervise_cmd(*argv), cwd=git_repo, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=60, env={**os.environ, **off})
    assert proc.stderr, proc
    assert b"\x1b" not in proc.stderr and b"\x07" not in proc.stderr, proc.stderr
    assert b"\\x1b" in proc.stderr, proc.stderr  # named, not dropped
    _no_traceback(proc.stderr)


@pytest.mark.parametrize("encoding", ["", "ascii"])
@pytest.mark.parametrize("verb", [["status"], ["status", "--format", "json"], ["config"],
                                  ["doctor"], ["install", "claude"], ["uninstall", "claude"],
                                  ["digest"]], ids=lambda v: "-".join(v[:2]))
def test_a_project_folder_whose_name_is_not_utf8(tmp_path: Path, verb: list[str],
                                                 encoding: str) -> None:
    """A folder named with a byte that is not UTF-8: ``install``/``uninstall``/``doctor`` ended
    in "internal error: UnicodeDecodeError" (git's answer decoded as text), ``status`` under
    ``PYTHONIOENCODING=ascii`` in "UnicodeEncodeError"."""
    project = Path(os.fsdecode(bytes(tmp_path) + b"/bad\xffname"))
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True, timeout=30,
                   env={k: v for k, v in os.environ.items() if not k.startswith("GIT_")})
    (project / "supervise.toml").write_text('[[stages]]\nname = "b"\nrun = ["echo", "hi"]\n')
    env = {**os.environ, "PYTHONIOENCODING": encoding} if encoding else None
    proc = subprocess.run(supervise_cmd(*verb, "-C", str(project)), stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=60, env=env, cwd=tmp_path)
    _no_traceback(proc.stderr)
    assert proc.returncode in (0, 1), proc.stderr  # doctor: 1 for its failed checks
    if verb == ["status"]:
        assert b"bad\xffname" in proc.stdout, proc.stdout  # the name's own bytes, as ls shows it


@pytest.mark.parametrize("verb", [["status"], ["config"], ["doctor"], ["digest"],
                                  ["install", "claude"], ["uninstall", "claude"]],
                         ids=lambda v: v[0])
def test_a_deleted_current_directory_is_one_line(tmp_path: Path, git_repo: Path,
                                                 verb: list[str]) -> None:
    """``cd x; rm -r ../x; supervise status``: every verb said "internal error:
    FileNotFoundError". Now one line naming the problem and the way out (-C), exit 1; with
    an absolute ``-C`` the verb works."""
    gone = tmp_path / "gone"
    gone.mkdir()
    argv = supervise_cmd(*verb)
    script = 'cd "$1" && rmdir "$1" && shift && exec "$@"'
    proc = subprocess.run(["sh", "-c", script, "sh", str(gone), *argv], stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=60)
    lines = proc.stderr.decode().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, lines
    assert "current directory cannot be read" in lines[0] and "-C" in lines[0], lines
    gone.mkdir()
    proc = subprocess.run(["sh", "-c", script, "sh", str(gone), *argv, "-C", str(git_repo)],
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    _no_traceback(proc.stderr)
    assert b"current directory" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("verb", ["install", "uninstall"])
@pytest.mark.parametrize("home", ["missing", "relative", "file"])
def test_a_user_scope_install_with_a_bad_home_writes_nothing(tmp_path: Path, git_repo: Path,
                                                             verb: str, home: str) -> None:
    """``HOME=/nonexistent supervise install codex --scope user`` created
    ``/nonexistent/.codex/hooks.json``; a relative HOME wrote under the current directory."""
    value = {"missing": str(tmp_path / "no-such-home"), "relative": "rel-home",
             "file": str(git_repo / "a-file")}[home]
    (git_repo / "a-file").write_text("x")
    env = {**os.environ, "HOME": value}
    env.pop("CODEX_HOME", None)
    proc = subprocess.run(supervise_cmd(verb, "codex", "--scope", "user"), cwd=git_repo,
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=60, env=env)
    lines = proc.stderr.decode().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and "(HOME)" in lines[0], lines
    assert not (tmp_path / "no-such-home").exists() and not (git_repo / "rel-home").exists()


UNKNOWN_USER = "~no-such-user-wk13"


@pytest.mark.parametrize("case", ["-C", "--project", "SUPERVISE_STATE_DIR", "stage cwd",
                                  "memory dir option", "PI_CODING_AGENT_DIR"])
def test_a_tilde_of_an_unknown_user_is_never_an_internal_error(git_repo: Path, tmp_path: Path,
                                                               case: str) -> None:
    """``~user`` of a user this machine does not have stays as written, as a shell leaves it
    (``pathlib.Path.expanduser`` raised RuntimeError: "internal error", status 3, and a
    SessionStart told the model the digest did not run): ``-C`` / ``--project`` is the usual
    one-line usage error (2), the state dir, a stage's ``cwd``, the memory store and a
    harness's config dir are the relative folder the text names."""
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    env.pop("SUPERVISE_STATE_DIR", None)
    (tmp_path / "home").mkdir()
    argv = ["digest"]
    if case in ("-C", "--project"):
        argv += [case, f"{UNKNOWN_USER}/x"]
    elif case == "SUPERVISE_STATE_DIR":
        env["SUPERVISE_STATE_DIR"] = f"{UNKNOWN_USER}/state"
    elif case == "stage cwd":
        (git_repo / "supervise.toml").write_text(
            f'[[stages]]\nname = "where"\nrun = ["pwd"]\ncwd = "{UNKNOWN_USER}"\n')
        (git_repo / UNKNOWN_USER).mkdir()
    elif case == "memory dir option":
        (git_repo / "supervise.toml").write_text(
            f'[[stages]]\nname = "memory"\nbuiltin = "memory"\n'
            f'[stages.options]\ndir = "{UNKNOWN_USER}/store"\n')
    else:
        env["PI_CODING_AGENT_DIR"] = f"{UNKNOWN_USER}/pi"
        argv = ["install", "pi", "--scope", "user"]
    proc = subprocess.run(supervise_cmd(*argv), cwd=git_repo, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=120, env=env)
    _no_traceback(proc.stderr)
    out = proc.stdout.decode()
    if case in ("-C", "--project"):
        lines = proc.stderr.decode().splitlines()
        assert proc.returncode == 2 and f"{UNKNOWN_USER}/x: no such directory" in lines[-1], lines
    elif case == "SUPERVISE_STATE_DIR":
        assert proc.returncode == 0, proc.stderr
        assert (git_repo / UNKNOWN_USER / "state").is_dir()
    elif case == "stage cwd":
        assert proc.returncode == 0 and str(git_repo / UNKNOWN_USER) in out, (out, proc.stderr)
    elif case == "memory dir option":
        assert proc.returncode == 0, proc.stderr
        log = git_repo / ".supervise" / "logs" / "memory.log"
        assert "internal error" not in (log.read_text() if log.exists() else ""), log.read_text()
    else:
        assert proc.returncode in (0, 1) and len(proc.stderr.splitlines()) <= 1, proc.stderr


NO_PASSWD_UID = 54321
"""A user id without a passwd entry (a container started with ``--user 54321``)."""
AS_NO_PASSWD_UID = ["/usr/bin/setpriv", "--reuid", str(NO_PASSWD_UID), "--regid",
                    str(NO_PASSWD_UID), "--clear-groups"]
_RUNTIME_PROBE = ("import supervisor, anyio, psutil, pydantic, yaml, sys; "
                  "print(supervisor.__file__)")


def _runtime_dists() -> list[str]:
    """The distributions ``supervise`` needs at run time: watchkeeper's requirements (no
    extras), closed over theirs, as installed here."""
    import importlib.metadata as md
    import re

    todo, seen = ["watchkeeper"], set()
    while todo:
        name = todo.pop()
        if name.lower() in seen:
            continue
        try:
            reqs = md.requires(name) or []
        except md.PackageNotFoundError:  # a marker left it out here (exceptiongroup on 3.11)
            continue
        seen.add(name.lower())
        for req in reqs:
            if "extra ==" in req:
                continue
            todo.append(re.split(r"[\s<>=!~;\[(]", req, maxsplit=1)[0])
    return sorted(seen - {"watchkeeper"})


@pytest.fixture(scope="module")
def no_passwd_runtime() -> Iterator[tuple[list[str], dict[str, str]]]:
    """``(argv prefix, environment additions)`` that run ``supervise`` as
    :data:`NO_PASSWD_UID`. That user must be able to read what it runs: a clone in a 0700
    ``mktemp -d`` folder (or under a 0700 home) is not readable by it (``No module named
    supervisor``, which the verbs' checks took for a pass). The checkout's own interpreter is
    used when that user can import ``supervisor`` from this checkout with it; else a copy of
    the package, its stages and its run-time distributions goes into a world-readable folder,
    run by the real interpreter with ``PYTHONPATH``. Skips, saying why, when neither works."""
    import importlib.metadata as md
    import shutil
    import tempfile

    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not os.path.exists(AS_NO_PASSWD_UID[0]):
        pytest.skip("needs root and setpriv to run as a user id without a passwd entry")
    ours = str(Path(__file__).resolve().parents[1] / "supervisor" / "__init__.py")

    def probe(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(AS_NO_PASSWD_UID + argv + ["-c", _RUNTIME_PROBE], cwd="/",
                              env={**os.environ, **env}, capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=60)

    first = probe([sys.executable], {})
    if first.returncode == 0 and first.stdout.decode().strip() == ours:
        yield [sys.executable, "-m", "supervisor"], {}
        return
    for base in (tempfile.gettempdir(), "/tmp", "/var/tmp"):
        if os.path.isdir(base) and os.stat(base).st_mode & 0o001:  # others may pass through
            break
    else:
        pytest.skip("no folder the other user id can reach to hold a readable copy")
    top = Path(tempfile.mkdtemp(prefix="wk-runtime-", dir=base))
    os.chmod(top, 0o755)
    root = Path(__file__).resolve().parents[1]
    shutil.copytree(root / "supervisor", top / "supervisor",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(root / "stages", top / "stages", ignore=shutil.ignore_patterns("__pycache__"))
    for name in _runtime_dists():
        dist = md.distribution(name)
        for rel in dist.files or []:
            if ".." in rel.parts or rel.parts[0].endswith(".dist-info") or "__pycache__" in rel.parts:
                continue
            src = Path(str(dist.locate_file(rel)))
            if src.is_file():
                (top / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, top / rel)
    for folder, dirs, files in os.walk(top):
        for d in dirs:
            os.chmod(os.path.join(folder, d), 0o755)
        for f in files:
            os.chmod(os.path.join(folder, f), 0o644)
    python = os.path.realpath(sys.executable)  # the venv's link may sit in the unreadable clone
    env = {"PYTHONPATH": str(top)}
    second = probe([python], env)
    if second.returncode != 0 or second.stdout.decode().strip() != str(top / "supervisor" / "__init__.py"):
        shutil.rmtree(top, ignore_errors=True)
        pytest.skip(f"user id {NO_PASSWD_UID} cannot run {python} with a readable copy of the "
                    f"package: {second.stderr.decode(errors='replace').strip()[-300:]}")
    try:
        yield [python, "-m", "supervisor"], env
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.parametrize("argv", [["install", "claude"], ["install", "claude", "--scope", "user"],
                                  ["uninstall", "claude"], ["doctor"],
                                  ["digest", "--session-start"]],
                         ids=" ".join)
def test_no_home_at_all_is_never_an_internal_error(
        argv: list[str], no_passwd_runtime: tuple[list[str], dict[str, str]]) -> None:
    """``HOME`` unset and a user id without a passwd entry (a container started with
    ``--user 12345``): ``pathlib.Path.home()`` raised RuntimeError, and every ``install``,
    ``uninstall`` and ``doctor`` ended in "internal error" (status 3), a project-scope install
    included, which needs no home. Now the home is ``~`` as ``os.path.expanduser`` leaves it: a
    project-scope verb works, a user-scope one is the one line naming HOME (status 1). Each
    case checks what its verb did (a registration written or removed, doctor's home line), so
    none passes when the verb never ran (it did for a clone in a 0700 folder)."""
    import tempfile

    prefix, extra = no_passwd_runtime
    with tempfile.TemporaryDirectory() as top:
        os.chmod(top, 0o755)
        project = Path(top) / "proj"
        project.mkdir()
        (project / ".git").mkdir()  # a project root for the verbs; no git is run as the user
        os.chown(project, NO_PASSWD_UID, NO_PASSWD_UID)
        env = {k: v for k, v in os.environ.items() if k != "HOME"
               and not k.startswith(("GIT_", "XDG_", "CODEX_HOME", "GEMINI_CLI_HOME"))}
        env.update(extra)
        (project / "supervise.toml").write_text(
            '[[stages]]\nname = "late"\nrun = ["true"]\ndeferred = true\n')
        os.chown(project / "supervise.toml", NO_PASSWD_UID, NO_PASSWD_UID)
        settings = project / ".claude" / "settings.json"
        if argv[0] == "uninstall":  # something to remove: a registration installed first
            first = subprocess.run(AS_NO_PASSWD_UID + prefix + ["install", "claude"], cwd=project,
                                   stdin=subprocess.DEVNULL, capture_output=True, timeout=120,
                                   env=env)
            assert first.returncode == 0 and "-m supervisor hook" in settings.read_text(), first
        proc = subprocess.run(AS_NO_PASSWD_UID + prefix + argv, cwd=project,
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=120, env=env)
        # no home is never a relative "~": nothing named ~ (a plan cache, a deferred key a
        # clone could ship, ~/.codex read from the cwd) anywhere under the working directory
        assert not [p for p in Path(top).rglob("~")], sorted(Path(top).rglob("*"))
        registered = settings.read_text() if settings.exists() else ""
    _no_traceback(proc.stderr)
    assert b"No module named" not in proc.stderr, proc.stderr
    if "--scope" in argv:
        lines = proc.stderr.decode().splitlines()
        assert proc.returncode == 1 and len(lines) == 1 and "(HOME)" in lines[0], lines
    elif argv[0] == "digest":  # the deferred stage is refused with the one-line reason
        assert proc.returncode == 0 and b"no home directory" in proc.stdout + proc.stderr, proc
    elif argv[0] == "install":
        assert proc.returncode == 0 and "-m supervisor hook" in registered, (proc, registered)
    elif argv[0] == "uninstall":
        assert proc.returncode == 0 and "-m supervisor hook" not in registered, (proc, registered)
    else:  # doctor: its checks ran, the user-scope ones skipped with the home line
        assert proc.returncode in (0, 1) and b"no home directory" in proc.stdout, proc.stdout


@pytest.mark.parametrize("home", ["", "relhome"])
def test_no_absolute_home_writes_and_reads_nothing_in_the_cwd(tmp_path: Path, home: str) -> None:
    """``HOME`` empty or relative (the no-passwd-entry case without root): the plan cache
    (``relhome/.cache/watchkeeper``), the deferred-result key and doctor's user-scope files
    were all joined onto it, so a digest wrote into the working directory (a project a clone
    controls) and could sign with a key the clone shipped. Now: no cache, the deferred stage
    refused with one line, doctor's user-scope checks a warn."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "supervise.toml").write_text(
        '[[stages]]\nname = "late"\nrun = ["true"]\ndeferred = true\n')
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GIT_", "XDG_", "CODEX_HOME", "GEMINI_CLI_HOME"))}
    env["HOME"] = home
    before = sorted(p.name for p in project.iterdir())
    for argv in (["digest", "--session-start"], ["doctor"]):
        proc = subprocess.run(supervise_cmd(*argv), cwd=project, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=120, env=env)
        _no_traceback(proc.stderr)
        if argv[0] == "digest":
            assert b"no home directory" in proc.stdout + proc.stderr, proc
        else:
            assert b"no home directory" in proc.stdout, proc.stdout
    after = sorted(p.name for p in project.iterdir() if p.name != ".supervise")
    assert after == before, after


@pytest.mark.parametrize("home", ["", "relhome"])
def test_stages_never_take_a_relative_home(tmp_path: Path, home: str) -> None:
    """The instruction and memory stages took ``os.path.expanduser("~")`` as the home: with
    ``HOME`` empty or relative (or unset with no passwd entry: ``"~"``) the user-level files
    (``~/.claude/CLAUDE.md``, ``~/.pi/agent``, ``dir = "~/notes"``) were looked up relative
    to the working directory, where a cloned repository could plant them."""
    code = (
        "import sys, os\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[1] / 'stages')!r})\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[1] / 'stages' / 'instructions')!r})\n"
        "from pathlib import Path\n"
        "from files import Place\n"
        "from memory.common import resolve_path\n"
        "home = Place.from_env().home\n"
        "notes = resolve_path(Path(os.getcwd()), '~/notes')\n"
        "print(home.is_absolute(), notes.is_relative_to(os.getcwd()), home.exists())\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "SUPERVISE_"))}
    env["HOME"] = home
    (tmp_path / "relhome" / ".claude").mkdir(parents=True)
    (tmp_path / "notes").mkdir()
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, timeout=60)
    assert proc.stdout.split() == [b"True", b"False", b"False"], (proc.stdout, proc.stderr)
