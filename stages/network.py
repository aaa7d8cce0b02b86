"""Built-in stage ``network`` (meant to run ``deferred = true``): can we reach the upstream,
and is the GitHub CLI logged in?

* Upstream reachability: ``git ls-remote <remote> HEAD`` for the current branch's remote (else
  ``origin``, else the first remote), no prompts (``GIT_TERMINAL_PROMPT=0``, ssh in BatchMode
  unless the user configured an ssh command), killed with its whole process group at the deadline.
* ``gh auth status`` when ``gh`` is on PATH, under the same deadline.

Both run at once; the stage ends within its ``timeout`` option (seconds) plus a moment, offline
included, and says ``UNREACHABLE`` with the reason. Silent when there is no remote and no ``gh``.
Credentials in remote URLs are never printed. Always exits 0. See ``docs/stages/network.md``.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import clean_git_env, finish, opt_float, opt_strings, spawn, stage_options  # noqa: E402

DEFAULT_TIMEOUT = 10.0
_USERINFO = re.compile(r"^([a-z][a-z0-9+.-]*://)[^/@]*@", re.IGNORECASE)


def redact(url: str) -> str:
    """``url`` without a ``user:password@`` part (``https://***@host/...``)."""
    return _USERINFO.sub(r"\1***@", url)


def git_config(cwd: Path, timeout: float) -> tuple[dict[str, str], str] | None:
    """``(config subset, current branch)``, or None outside git."""
    proc = spawn(["git", "config", "-z", "--get-regexp",
                  r"^(branch\..*\.remote|remote\..*\.url|core\.sshcommand)$"], cwd)
    head = spawn(["git", "symbolic-ref", "-q", "--short", "HEAD"], cwd)
    deadline = time.monotonic() + timeout
    rc, out, _ = finish(proc, deadline - time.monotonic())
    h_rc, h_out, _ = finish(head, deadline - time.monotonic())
    if rc not in (0, 1):  # 1 = no match; 128 = not a repository
        return None
    config: dict[str, str] = {}
    for item in out.decode("utf-8", "replace").split("\0"):
        key, _, value = item.partition("\n")
        if key:
            config.setdefault(key.lower() if key.startswith("core.") else key, value)
    return config, (h_out.decode("utf-8", "replace").strip() if h_rc == 0 else "")


def pick_remotes(config: dict[str, str], branch: str, wanted: tuple[str, ...]) -> list[tuple[str, str]]:
    """``[(remote name, url)]`` to probe: ``wanted`` if given, else the branch's remote, else
    ``origin``, else the first remote configured."""
    urls = {k[len("remote."):-len(".url")]: v for k, v in config.items()
            if k.startswith("remote.") and k.endswith(".url")}
    if wanted:
        return [(n, urls[n]) for n in wanted if n in urls]
    name = config.get(f"branch.{branch}.remote", "") if branch else ""
    if name in urls:
        return [(name, urls[name])]
    if "origin" in urls:
        return [("origin", urls["origin"])]
    return [next(iter(urls.items()))] if urls else []


def first_line(data: bytes) -> str:
    for line in data.decode("utf-8", "replace").splitlines():
        if line.strip():
            return redact(line.strip())[:200]
    return ""


def main() -> int:
    options = stage_options()
    timeout = opt_float(options, "timeout", DEFAULT_TIMEOUT, minimum=0.1)
    cwd = Path.cwd()
    started = time.monotonic()
    found = git_config(cwd, timeout)
    remotes = pick_remotes(found[0], found[1], opt_strings(options, "remotes", ())) if found else []
    env = clean_git_env()
    if found and "core.sshcommand" not in found[0] and not (env.get("GIT_SSH_COMMAND") or env.get("GIT_SSH")):
        env["GIT_SSH_COMMAND"] = f"ssh -o BatchMode=yes -o ConnectTimeout={max(int(timeout), 1)}"
    env["SSH_ASKPASS_REQUIRE"] = "never"
    probes = []
    for name, url in remotes:
        try:
            probes.append((name, url, spawn(["git", "ls-remote", name, "HEAD"], cwd, env)))
        except OSError as err:
            probes.append((name, url, err))
    gh = shutil.which("gh") if options.get("gh", True) is not False else None
    gh_proc = None
    if gh:
        gh_env = {**env, "GH_PROMPT_DISABLED": "1", "NO_COLOR": "1", "GH_NO_UPDATE_NOTIFIER": "1"}
        try:
            gh_proc = spawn([gh, "auth", "status"], cwd, gh_env)
        except OSError:
            gh_proc = None
    deadline = started + timeout
    lines = []
    for name, url, proc in probes:
        where = f"Remote {name} ({redact(url)})"
        if isinstance(proc, OSError):
            lines.append(f"{where}: not checked: git could not start ({proc.strerror})")
            continue
        rc, _out, err = finish(proc, deadline - time.monotonic())
        spent = time.monotonic() - started
        if rc == 0:
            lines.append(f"{where}: reachable ({spent:.1f} s)")
        elif rc is None:
            lines.append(f"{where}: UNREACHABLE: no answer within {timeout:g} s")
        else:
            lines.append(f"{where}: UNREACHABLE: {first_line(err) or f'git exited {rc}'}")
    if gh_proc is not None:
        rc, out, err = finish(gh_proc, deadline - time.monotonic())
        text = (out + b"\n" + err).decode("utf-8", "replace")
        who = [re.sub(r"\s+", " ", ln.strip(" ✓-"))[:200] for ln in text.splitlines() if "Logged in to" in ln]
        if rc == 0:
            lines.append("GitHub CLI: " + ("; ".join(who) if who else "logged in"))
        elif rc is None:
            lines.append(f"GitHub CLI: auth status unknown: no answer within {timeout:g} s")
        else:
            lines.append(f"GitHub CLI: NOT logged in or token invalid: run `gh auth login`"
                         + (f" ({first_line(err or out)})" if first_line(err or out) else ""))
    if lines:
        sys.stdout.buffer.write(("## Network\n" + "\n".join(lines) + "\n").encode("utf-8", "replace"))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as err:  # a stage exits 0 on every internal failure
        sys.stderr.write(f"network: internal error: {type(err).__name__}: {err}\n")
        sys.exit(0)
