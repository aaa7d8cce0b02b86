"""What a new user trips on (issue 14): config defaults, errors in plain words, CLI help."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import run_cli


def write_config(project: Path, body: str) -> None:
    (project / "supervise.toml").write_text(body)


def config_error(project: Path, body: str, *env: tuple[str, str]) -> str:
    """Write ``body`` as supervise.toml, run `supervise config`: the one stderr line (exit 1)."""
    write_config(project, body)
    proc = run_cli("config", cwd=project, env=dict(env))
    assert proc.returncode == 1, proc.stdout
    lines = proc.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


# -- item 1: an absent `stages` key means the default stages ------------------------------


def test_budget_only_config_keeps_the_default_stages(tmp_path: Path) -> None:
    write_config(tmp_path, "budget = 60\n")
    doc = json.loads(run_cli("config", cwd=tmp_path).stdout)
    default = json.loads(run_cli("config", cwd=tmp_path / "..").stdout)  # no config there
    assert doc["budget"] == 60
    assert [s["name"] for s in doc["stages"]] == [s["name"] for s in default["stages"]]
    assert doc["stages"], "the embedded default has stages"
    assert "embedded default stages" in doc["stages_from"]


def test_explicit_empty_stages_means_none(tmp_path: Path) -> None:
    write_config(tmp_path, "budget = 60\nstages = []\n")
    doc = json.loads(run_cli("config", cwd=tmp_path).stdout)
    assert doc["stages"] == []
    assert doc["stages_from"] == f"the stages of {tmp_path / 'supervise.toml'}"
    proc = run_cli("digest", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == b""


def test_budget_only_config_digest_is_not_empty(git_repo: Path) -> None:
    write_config(git_repo, "budget = 60\n")
    proc = run_cli("digest", cwd=git_repo)
    assert proc.returncode == 0, proc.stderr
    assert b"## Repository" in proc.stdout  # the default `repo` stage ran


def test_doctor_says_which_stages_apply(git_repo: Path) -> None:
    write_config(git_repo, "budget = 60\n")
    out = run_cli("doctor", "-C", str(git_repo), cwd=git_repo).stdout.decode()
    line = next(l for l in out.splitlines() if "config:" in l)
    assert "embedded default stages" in line and " 1 stages" not in line


# -- item 5 and 11: config errors exit 1, once, in plain words -----------------------------


def test_unknown_builtin_is_a_config_error(tmp_path: Path) -> None:
    line = config_error(tmp_path, '[[stages]]\nname = "x"\nbuiltin = "no-such-stage"\n')
    assert "'no-such-stage' is not a built-in stage" in line and "repo" in line
    assert "String should" not in line and "pattern" not in line
    proc = run_cli("digest", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.decode().count("no-such-stage") == 1, proc.stderr


@pytest.mark.parametrize(("body", "want"), [
    ('[[stages]]\nname = "a"\nrun = "true"\n[[stages]]\nname = "a"\nrun = "true"\n',
     "stages number 1 and 2 are both named 'a'"),
    ('[[stages]]\nname = "a"\nrun = "true"\nneeds = ["x"]\n',
     "stage 'a' needs 'x', but no stage has that name"),
    ("budget = 0\n", "key 'budget': must be more than 0 (it is 0)"),
    ('budget = "x"\n', "key 'budget': must be a number (it is 'x')"),
    ('[[stages]]\nname = "a b"\nrun = "true"\n', "[[stages]] 'a b' (number 1): key 'name': must"),
    ('[[stages]]\nname = "a"\nrun = "true"\nok_exit = []\n', "'ok_exit' is empty"),
])
def test_config_errors_read_as_a_person_writes(tmp_path: Path, body: str, want: str) -> None:
    line = config_error(tmp_path, body)
    assert want in line, line
    for jargon in ("(top level)", "Input should", "Value error", "String should"):
        assert jargon not in line, line


@pytest.mark.parametrize("value", ["0", "-3", "abc", "inf"])
def test_supervise_timeout_errors_say_the_same_thing(tmp_path: Path, value: str) -> None:
    proc = run_cli("config", cwd=tmp_path, env={"SUPERVISE_TIMEOUT": value})
    assert proc.returncode == 1
    assert proc.stderr.decode().strip() == (f"supervise: environment: SUPERVISE_TIMEOUT="
                                            f"'{value}': expected a number of seconds greater than 0")


# -- item 6: ok_exit ------------------------------------------------------------------------


def test_ok_exit_makes_a_status_success(tmp_path: Path) -> None:
    write_config(tmp_path, '[[stages]]\nname = "todo"\nrun = ["sh", "-c", "exit 1"]\n'
                 "ok_exit = [0, 1]\n"
                 '[[stages]]\nname = "bad"\nrun = ["sh", "-c", "exit 1"]\n')
    proc = run_cli("digest", "--format", "json", cwd=tmp_path)
    stages = {s["name"]: s for s in json.loads(proc.stdout)["stages"]}
    assert stages["todo"]["status"] == "ok" and stages["todo"]["exit_code"] == 1
    assert stages["bad"]["status"] == "failed"
    text = run_cli("digest", cwd=tmp_path).stdout.decode()
    assert "'todo' exited" not in text and "'bad' exited with status 1" in text


# -- items 2 and 3: deferred results in JSON, once per stage -------------------------------


def _wait_for_result(project: Path, stage: str) -> None:
    import time

    folder = project / ".supervise" / "deferred" / stage
    for _ in range(200):
        if list(folder.glob("result-*.json")):
            return
        time.sleep(0.05)
    raise AssertionError("the deferred runner wrote no result")


def test_json_digest_delivers_a_pending_deferred_result(git_repo: Path) -> None:
    # Gates, not sleeps: the first run ends only when `go` exists, every later run only when
    # `release` does (a later run that ended before the third digest read would be a second,
    # legitimate EARLIER result: under load it once did).
    gates = git_repo.parent
    script = (f"if [ -e '{gates}/ran-once' ]; then until [ -e '{gates}/release' ]; do sleep 0.05; "
              f"done; echo Y; else touch '{gates}/ran-once'; until [ -e '{gates}/go' ]; "
              "do sleep 0.05; done; echo X; fi")
    write_config(git_repo, f'[[stages]]\nname = "later"\nrun = ["sh", "-c", {json.dumps(script)}]\n'
                 "deferred = true\n")
    try:
        first = run_cli("digest", "--session-start", cwd=git_repo)
        assert b"IN PROGRESS: deferred stage 'later'" in first.stdout
        (gates / "go").touch()
        _wait_for_result(git_repo, "later")
        doc = json.loads(run_cli("digest", "--session-start", "--format", "json", cwd=git_repo).stdout)
        (later,) = doc["stages"]
        assert later["status"] == "deferred"
        assert "X" in later["output"] and "EARLIER run" in later["output"], later
        # delivered once: a third digest shows only its own run (in progress)
        third = run_cli("digest", "--session-start", "--format", "json", cwd=git_repo)
        assert "EARLIER" not in json.loads(third.stdout)["stages"][0]["output"]
    finally:
        (gates / "go").touch()
        (gates / "release").touch()  # later runs end, so no process outlives the test


def test_one_deferred_stage_appears_once(git_repo: Path) -> None:
    write_config(git_repo, '[[stages]]\nname = "later"\nrun = ["sh", "-c", "sleep 0.3; echo RUN"]\n'
                 'deferred = true\n[[stages]]\nname = "slow"\nrun = ["sleep", "2"]\n')
    run_cli("digest", "--session-start", "--only", "later", cwd=git_repo)  # ends at once: the result stays pending
    _wait_for_result(git_repo, "later")
    text = run_cli("digest", "--session-start", cwd=git_repo).stdout.decode()  # `slow` gives the fresh run time
    assert text.count("[deferred stage 'later'") == 1, text
    assert "ran AFTER" not in text and "EARLIER" not in text and "IN PROGRESS" not in text
    assert not list((git_repo / ".supervise" / "deferred" / "later").glob("result-*.json"))


# -- item 4: every verb validates -C the same way, and never creates it ---------------------


@pytest.mark.parametrize("verb", [["digest"], ["status"], ["config"], ["doctor"],
                                  ["install", "claude"], ["uninstall", "claude"]])
@pytest.mark.parametrize("flag", ["-C", "--project"])
def test_every_verb_rejects_a_missing_directory(tmp_path: Path, verb: list[str], flag: str) -> None:
    missing = tmp_path / "nonexistent"
    proc = run_cli(*verb, flag, str(missing), cwd=tmp_path)
    assert proc.returncode == 2, proc
    err = proc.stderr.decode()
    assert f"argument -C/--project: {missing}: no such directory" in err, err
    assert not missing.exists()
    afile = tmp_path / "afile"
    afile.write_text("")
    proc = run_cli(*verb, flag, str(afile), cwd=tmp_path)
    assert proc.returncode == 2 and b"not a directory" in proc.stderr


# -- item 10: help for every option, -V, a cheap --version ----------------------------------

VERBS = ["digest", "run", "hook", "nudge", "status", "install", "uninstall", "doctor", "config",
         "bridge", "mcp"]


def _entries_without_help(text: str) -> list[str]:
    """Option/argument entries of an argparse help text that carry no help line."""
    import re

    lines = text.splitlines()
    missing, section = [], False
    for i, line in enumerate(lines):
        if line.endswith(":") and not line.startswith(" "):
            section = line in ("options:", "positional arguments:")
            continue
        if not section or not re.match(r"^  \S", line):
            continue
        own = re.search(r"\S\s{2,}\S", line.strip())
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if not own and not re.match(r"^ {4,}\S", nxt):
            missing.append(line.strip())
    return missing


@pytest.mark.parametrize("verb", VERBS)
def test_every_option_of_every_verb_has_help(tmp_path: Path, verb: str) -> None:
    proc = run_cli(verb, "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout.decode()
    assert text.startswith(f"usage: supervise {verb}"), text
    assert "options:" in text
    assert _entries_without_help(text) == []
    assert _entries_without_help("options:\n  --format {text,json}\n  -C DIR      x\n") == \
        ["--format {text,json}"]  # the checker itself finds a bare option


def test_version_is_listed_and_cheap(tmp_path: Path) -> None:
    import subprocess
    import sys
    import tomllib

    main_help = run_cli("--help", cwd=tmp_path).stdout.decode()
    assert "-V, --version" in main_help and "-h, --help" in main_help
    import importlib.metadata

    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert pyproject["project"]["dynamic"] == ["version"]  # read from gemini-extension.json
    for flag in ("-V", "--version"):
        proc = run_cli(flag, cwd=tmp_path)
        assert proc.returncode == 0
        assert proc.stdout.decode() == f"supervise (watchkeeper) {importlib.metadata.version('watchkeeper')}\n"
    trace = subprocess.run([sys.executable, "-X", "importtime", "-m", "supervisor", "-V"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=30).stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in trace.splitlines()}
    ours = {name for name in imported if name.startswith("supervisor.")}
    # the entry's quiet signal handlers and stdout outlet (docs/cli.md) come first, stdlib only;
    # the version is read from its one home, gemini-extension.json, with the stdlib-only reader
    assert ours <= {"supervisor._main", "supervisor._exitcodes", "supervisor._version",
                    "supervisor._jsontext", "supervisor._interrupts", "supervisor.commands",
                    "supervisor.commands._stdio"}, ours
    assert not {"importlib.metadata", "anyio", "pydantic"} & imported


def test_hook_and_nudge_never_exit_on_bad_arguments(tmp_path: Path) -> None:
    proc = run_cli("hook", "claude", "--source", "--event", "bogus", "extra", cwd=tmp_path,
                   env={"SUPERVISE_OFF": "1"})
    assert proc.returncode == 0
    err = proc.stderr.decode()
    assert "--source needs a value" in err and "unknown --event 'bogus'" in err
    assert "unexpected argument 'extra'" in err
    assert run_cli("nudge", "--what", cwd=tmp_path).returncode == 0


# -- item 9: a run that could not read its config writes nothing ---------------------------


def test_config_error_digest_writes_nothing(git_repo: Path) -> None:
    write_config(git_repo, 'budget = "soon"\n')
    exclude = git_repo / ".git" / "info" / "exclude"
    before = exclude.read_bytes() if exclude.exists() else None
    proc = run_cli("digest", cwd=git_repo)
    assert proc.returncode == 1
    assert b"config error" in proc.stdout and b"## Repository" in proc.stdout  # default ran
    assert not (git_repo / ".supervise").exists()
    assert (exclude.read_bytes() if exclude.exists() else None) == before
    write_config(git_repo, "budget = 30\n")  # the same run with a good config does write
    assert run_cli("digest", cwd=git_repo).returncode == 0
    assert (git_repo / ".supervise").is_dir()


# -- item 7: status counts terminal digests, keeps a history, explains itself ---------------


def test_status_counts_terminal_digests_and_keeps_a_history(git_repo: Path) -> None:
    write_config(git_repo, '[[stages]]\nname = "big"\nrun = ["sh", "-c", "seq 1 2000"]\n'
                 "max_output = 100\n")
    empty = run_cli("status", cwd=git_repo).stdout.decode()
    assert "no digest recorded" in empty
    assert "exposure   none recorded: no memory file" in empty  # explained, not bare
    for source in ("startup", "compact", "clear"):
        assert run_cli("digest", "--session-start", "--source", source, cwd=git_repo).returncode == 0
    text = run_cli("status", cwd=git_repo).stdout.decode()
    assert "last       full digest from a terminal, source clear" in text, text
    big = next(l for l in text.splitlines() if l.strip().startswith("big "))
    assert "CUT by max_output" in big
    assert "recent     3 digest(s), newest first:" in text
    doc = json.loads(run_cli("status", "--format", "json", cwd=git_repo).stdout)
    assert [h["source"] for h in doc["history"]] == ["clear", "compact", "startup"]
    assert all(h["harness"] == "" and h["truncated"] is False and h["budget"] == 120
               and h["seconds"] > 0 for h in doc["history"])
    assert doc["last_digest"]["stages"][0]["truncated"] is True


def test_status_history_keeps_the_last_ten(git_repo: Path) -> None:
    """Twelve digests: ``status`` lists the newest ten, newest first. The first and the last
    run through the CLI; the ten between are recorded in-process by ``record_digest`` (what
    the digest verb calls at its end): twelve CLI digests took 60 s on a loaded host, the
    whole of the test's timeout."""
    import time
    from functools import partial

    import anyio

    from supervisor import DigestConfig, SessionContext, StageSpec, run_digest
    from supervisor.session._routing import record_digest

    write_config(git_repo, '[[stages]]\nname = "a"\nrun = "true"\n')
    run_cli("digest", "--session-start", cwd=git_repo)
    first_done = time.time()
    context = SessionContext(project_dir=git_repo, state_dir=git_repo / ".supervise")
    config = DigestConfig(stages=(StageSpec(name="a", run=["true"]),))
    result = anyio.run(partial(run_digest, config, context))
    for _ in range(10):
        record_digest(context.state_dir, result, context)
    last_start = time.time()
    run_cli("digest", "--session-start", cwd=git_repo)
    doc = json.loads(run_cli("status", "--format", "json", cwd=git_repo).stdout)
    assert len(doc["history"]) == 10
    stamps = [h["finished_at"] for h in doc["history"]]
    assert stamps == sorted(stamps, reverse=True)
    assert stamps[0] >= last_start  # the CLI's newest digest is kept, first
    assert min(stamps) > first_done  # the two oldest (the first CLI digest among them) are gone


# -- item 11: the banner reads well at any budget ---------------------------------------------


@pytest.mark.parametrize(("budget", "shown"), [("0.001", "0.001s"), ("0.5", "0.5s"), ("1", "1s")])
def test_banner_names_the_budget_as_given_once(tmp_path: Path, budget: str, shown: str) -> None:
    write_config(tmp_path, '[[stages]]\nname = "slow"\nrun = ["sleep", "30"]\n')
    proc = run_cli("digest", "--budget", budget, cwd=tmp_path)
    text = proc.stdout.decode()
    line = next(l for l in text.splitlines() if "STARTUP TRUNCATED" in l)
    assert f"to end within its {shown} budget; the time to kill stages is reserved inside it." \
        in line, line
    assert ") (" not in line and "0.0s budget" not in line and line.count("budget") == 1


# -- item 14: the local settings file for Claude ---------------------------------------------


def test_install_claude_local_scope_stays_out_of_the_repo(git_repo: Path) -> None:
    import subprocess

    proc = run_cli("install", "claude", cwd=git_repo)
    out = proc.stdout.decode()
    assert "note: .claude/settings.json is usually committed" in out and "--scope local" in out
    assert run_cli("uninstall", "claude", cwd=git_repo).returncode == 0
    proc = run_cli("install", "claude", "--scope", "local", cwd=git_repo)
    assert proc.returncode == 0, proc.stderr
    assert "note:" not in proc.stdout.decode()
    local = git_repo / ".claude" / "settings.local.json"
    data = json.loads(local.read_text())
    assert "SessionStart" in data["hooks"] and not (git_repo / ".claude" / "settings.json").exists()
    ignored = subprocess.run(["git", "-C", str(git_repo), "check-ignore", "-q", str(local)])
    assert ignored.returncode == 0, "settings.local.json must be git-ignored"
    code = run_cli("doctor", "claude", cwd=git_repo)
    assert code.returncode == 0, code.stdout
    assert b"registered in" in code.stdout and b"settings.local.json" in code.stdout
    # a second scope that would fire beside it: install defers and says how to move it
    proc = run_cli("install", "claude", cwd=git_repo)
    assert "already registered in .claude/settings.local.json" in proc.stderr.decode()
    assert not (git_repo / ".claude" / "settings.json").exists()
    # registered twice all the same (a hand copy): doctor fails and says how to keep one
    (git_repo / ".claude" / "settings.json").write_text(local.read_text())
    lines = run_cli("doctor", "claude", cwd=git_repo).stdout.decode().splitlines()
    assert any(l.startswith("FAIL") and "registered 2 times" in l for l in lines), lines
    assert any("keep one" in l and "--scope local" in l for l in lines), lines
    # harnesses without a local file skip it, they do not fail
    proc = run_cli("install", "codex", "pi", "--scope", "local", cwd=git_repo)
    assert proc.returncode == 0 and proc.stderr.decode().count("has no local settings file") == 2


# -- item 12: the harness installer says what it installs, why, and how far it got -----------


def test_install_harnesses_shows_progress_and_why(tmp_path: Path) -> None:
    """A stand-in `npm` (records the package it was asked for) keeps this offline."""
    import os
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text('#!/bin/sh\nfor a in "$@"; do case "$a" in *@[0-9]*) spec=$a;; esac; done\n'
                   'pkg=${spec%@*}; ver=${spec##*@}\nmkdir -p "node_modules/$pkg"\n'
                   'printf \'{\\n  "version": "%s"\\n}\\n\' "$ver" > "node_modules/$pkg/package.json"\n')
    npm.chmod(0o755)
    script = Path(__file__).resolve().parents[1] / "scripts" / "install-harnesses.sh"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "HARNESS_CACHE": str(tmp_path / "cache")}
    first = subprocess.run(["bash", str(script), "claude", "pi"], capture_output=True, text=True,
                           env=env, timeout=60)
    assert first.returncode == 0, first.stderr
    out = first.stdout
    from supervisor._harnesses import BY_NAME

    claude, pi = BY_NAME["claude"], BY_NAME["pi"]
    assert "end-to-end tests" in out and " GB " in out and 'not e2e' in out  # why, how big
    # the pins are the harness table's: the newest, then a floor that differs (the second set)
    assert f"[1/3] claude: Claude Code @anthropic-ai/claude-code@{claude.newest} ..." in out
    assert f"[2/3] claude (floor): Claude Code @anthropic-ai/claude-code@{claude.floor} ..." in out
    assert f"[3/3] pi: Pi @mariozechner/pi-coding-agent@{pi.newest} ..." in out
    assert "[3/3] pi installed in" in out and "install-harnesses: done in" in out
    assert (tmp_path / "cache" / "floor" / "node_modules" / "@anthropic-ai" / "claude-code").is_dir()
    second = subprocess.run(["bash", str(script), "claude", "pi"], capture_output=True,
                            text=True, env=env, timeout=60)
    assert second.stdout.count("already installed") == 3 and "[1/" not in second.stdout


def test_prompt_hook_delivers_one_result_per_stage(tmp_path: Path) -> None:
    """Two undelivered results of one stage (two earlier runs): the newest is delivered, the
    older one is superseded; both are claimed (never delivered later)."""
    from supervisor.engine._deferred import take_undelivered

    from helpers import write_result
    from supervisor.engine._deferred import result_cap

    folder = tmp_path / "deferred" / "net"
    for run_id, text in (("1000-a", "OLD"), ("2000-b", "NEW")):
        write_result(folder, run_id, {"status": "ok", "seconds": 0.1, "output": text})
    caps = {"net": result_cap(None)}
    texts = take_undelivered(tmp_path, caps)
    assert len(texts) == 1 and "NEW" in texts[0] and "OLD" not in texts[0]
    assert take_undelivered(tmp_path, caps) == []


def test_json_digest_states_a_config_error(tmp_path: Path) -> None:
    write_config(tmp_path, 'budget = "soon"\n')
    proc = run_cli("digest", "--format", "json", cwd=tmp_path)
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert "key 'budget': must be a number" in doc["config_error"] and "stages" in doc
    assert proc.stderr.decode().count("must be a number") == 1
    write_config(tmp_path, "budget = 10\nstages = []\n")
    assert "config_error" not in json.loads(run_cli("digest", "--format", "json", cwd=tmp_path).stdout)


def test_digest_help_states_the_true_defaults(tmp_path: Path) -> None:
    """`digest --help` names the budget and grace a run without the options uses: the
    environment, else the config, and the embedded default's values (a new user asked which
    budget applies when --budget is left out)."""
    import re
    import tomllib

    text = " ".join(run_cli("digest", "--help", cwd=tmp_path).stdout.decode().split())
    default = tomllib.loads(run_cli("config", "--default", cwd=tmp_path).stdout.decode())
    for flag, env, key in (("--budget", "SUPERVISE_TIMEOUT", "budget"),
                           ("--grace", "SUPERVISE_GRACE", "grace")):
        entry = re.search(rf"{flag} S (.*?)(?= --\w)", text)
        assert entry is not None, text
        assert env in entry.group(1), entry.group(1)
        assert f"{default[key]:g} in the embedded default" in entry.group(1), entry.group(1)
    effective = json.loads(run_cli("config", cwd=tmp_path, env={"SUPERVISE_TIMEOUT": "7"}).stdout)
    assert effective["budget"] == 7.0  # the environment does win over the embedded default


@pytest.mark.parametrize("verb", ["install", "uninstall", "doctor"])
def test_an_unknown_harness_lists_every_known_one(git_repo: Path, verb: str) -> None:
    """A typo's message lists every harness the verb takes, the bridged Pi and OpenCode
    included (they were missing: `install claud` offered claude..grok and all only)."""
    from supervisor.adapters import ADAPTERS

    proc = run_cli(verb, "claud", cwd=git_repo)
    assert proc.returncode == 2
    err = proc.stderr.decode()
    assert err.count("\n") == 1 and "unknown harness 'claud'" in err, err
    for name in [*ADAPTERS, "pi", "opencode"]:
        assert f" {name}," in err or f" {name})" in err, (name, err)
    assert not (git_repo / ".claude").exists()


def test_an_empty_digest_in_a_terminal_says_so(tmp_path: Path) -> None:
    """In a folder with nothing to show (no instruction file, memory store or git repository)
    the terminal digest printed nothing but its timing line; that line now says why."""
    import os
    import pty
    import subprocess

    from helpers import supervise_cmd

    def stderr_on_a_terminal(cwd: Path) -> tuple[bytes, str]:
        master, slave = pty.openpty()
        try:
            proc = subprocess.run(supervise_cmd("digest"), cwd=cwd, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=slave, timeout=60)
            os.close(slave)
            slave = -1
            chunks = []
            while True:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the terminal's other side is closed and drained
                    break
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(master)
            if slave >= 0:
                os.close(slave)
        return proc.stdout, b"".join(chunks).decode()

    empty = tmp_path / "empty"
    empty.mkdir()
    out, err = stderr_on_a_terminal(empty)
    assert out == b"" and "digest complete in" in err and "it printed nothing" in err, (out, err)
    (empty / "AGENTS.md").write_text("Use tabs.\n")
    out, err = stderr_on_a_terminal(empty)
    assert b"Use tabs." in out and "digest complete in" in err and "printed nothing" not in err, err
