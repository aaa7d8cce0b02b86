"""The hook's arguments: read by the table-driven parser (no argparse on the per-event path)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from supervisor.commands.hook import parse_hook_args


def test_registered_arguments_parse_without_problems() -> None:
    """What `supervise install` registers parses cleanly."""
    args = parse_hook_args(["claude", "--event", "post-tool", "--registered-timeout", "60"])
    assert (args.harness, args.event, args.registered_timeout, args.problems) == (
        "claude", "post-tool", 60.0, ())
    args = parse_hook_args(["--", "--odd harness"])
    assert args.harness == "--odd harness" and not args.problems


def test_hook_path_imports_no_argparse(tmp_path: Path) -> None:
    """The per-event hook reads its arguments without argparse (nor the gettext, shutil and
    locale its help formatter pulls in); `--help` prints the help from the same table."""
    argv = [sys.executable, "-X", "importtime", "-m", "supervisor", "hook", "claude",
            "--event", "prompt"]
    env = {"SUPERVISE_OFF": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    for _ in range(2):  # the first run validates the config and fills the cache
        proc = subprocess.run(argv, input=b"{}", capture_output=True, cwd=tmp_path, timeout=60,
                              env=env)
        assert proc.returncode == 0
    loaded = {line.split("|")[-1].strip() for line in proc.stderr.decode().splitlines()
              if line.startswith("import time:")}
    assert "supervisor.session._payload" in loaded  # the hook ran (import_module itself is not traced)
    assert not loaded & {"argparse", "gettext", "shutil"}, sorted(loaded & {"argparse", "gettext", "shutil"})
    helped = subprocess.run([sys.executable, "-m", "supervisor", "hook", "--help"],
                            capture_output=True, cwd=tmp_path, timeout=60)
    assert helped.returncode == 0 and b"--registered-timeout" in helped.stdout
