"""The ``repo`` stage's body (its program, ``__main__.py``, only imports and runs it).

A program file is compiled on every run; a module is read from its cached bytecode. The body
lives here so a digest does not recompile it at each session start.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from _common import finish, opt_float, opt_int, read_regular, stage_options, warn
from repo.calls import Calls
from supervisor._git import failure
from supervisor._sanitize import one_line

UNTRACKED = ("normal", "no", "all")


def parse_status(raw: bytes) -> tuple[dict[str, str], list[str]]:
    """Porcelain v2 ``-z`` output -> ``(headers, short lines)``; headers keyed without ``# ``
    (``branch.head``, ``branch.upstream``, ``branch.ab``, ``stash``), lines like ``M  path``.
    A path is untrusted text from the tree: each one goes through
    :func:`supervisor._sanitize.one_line` (a file named ``a\n## Instructions`` stays on its
    line, written ``a\\n## Instructions``)."""
    headers: dict[str, str] = {}
    lines: list[str] = []
    fields = raw.decode("utf-8", errors="replace").split("\0")
    i = 0
    while i < len(fields):
        f = fields[i]
        i += 1
        if not f:
            continue
        if f.startswith("# "):
            key, _, value = f[2:].partition(" ")
            headers[key] = value
        elif f[0] in "12u":
            parts = f.split(" ", {"1": 8, "2": 9, "u": 10}[f[0]])
            xy = parts[1].replace(".", " ")
            if f[0] == "2":  # renamed/copied: the original path is the next NUL field
                orig = fields[i] if i < len(fields) else "?"
                i += 1
                lines.append(f"{xy} {one_line(orig)} -> {one_line(parts[-1])}")
            else:
                lines.append(f"{xy} {one_line(parts[-1])}")
        elif f[0] in "?!":
            lines.append(f"{f[0] * 2} {one_line(f[2:])}")
    return headers, lines


def _small(path: Path) -> str:
    """A small git file's text (at most 64 KiB; :func:`_common.read_regular`: never blocking
    on a FIFO nor reading a device). Raises OSError when it cannot be read (the caller skips
    it)."""
    return read_regular(path, 64 * 1024).decode("utf-8", "replace")


def in_progress(git_dir: Path) -> list[str]:
    """Operations interrupted half-way (merge, rebase, am, cherry-pick, revert, bisect)."""
    out = []
    if (git_dir / "MERGE_HEAD").is_file():
        try:  # a planted FIFO or huge file in .git/ never holds the stage
            head = _small(git_dir / "MERGE_HEAD").split()[:1]
        except OSError:
            head = []
        out.append(f"merge in progress (merging {one_line(head[0][:12]) if head else '?'}): resolve, "
                   "then commit, or `git merge --abort`")
    for sub, what in (("rebase-merge", "rebase"), ("rebase-apply", "rebase")):
        d = git_dir / sub
        if d.is_dir():
            if sub == "rebase-apply" and (d / "applying").exists():
                what = "am"
            step = ""
            for num, end in (("msgnum", "end"), ("next", "last")):
                try:
                    step = f" (step {one_line(_small(d / num).strip()[:20])}/{one_line(_small(d / end).strip()[:20])})"
                    break
                except OSError:
                    continue
            out.append(f"{what} in progress{step}: `git {what} --continue` or `git {what} --abort`")
    for name, what in (("CHERRY_PICK_HEAD", "cherry-pick"), ("REVERT_HEAD", "revert")):
        if (git_dir / name).is_file():
            out.append(f"{what} in progress: `git {what} --continue` or `git {what} --abort`")
    if (git_dir / "BISECT_LOG").is_file():
        out.append("bisect in progress: `git bisect reset` when done")
    return out


def worktrees(git_dir: Path, common_dir: Path) -> list[str]:
    """The other worktrees of this repository, one line each: ``path [branch]`` (both through
    :func:`supervisor._sanitize.one_line`: a project path with a line feed cannot invent a
    phantom worktree)."""
    out = []
    here = git_dir.resolve()
    if here != common_dir.resolve() and common_dir.name == ".git":
        out.append(f"{one_line(str(common_dir.parent))} [main worktree]")
    base = common_dir / "worktrees"
    if not base.is_dir():
        return out
    for entry in sorted(base.iterdir()):
        if entry.resolve() == here:
            continue
        try:
            path = Path(_small(entry / "gitdir").strip()).parent
            head = _small(entry / "HEAD").strip()
        except OSError:
            continue
        branch = head.removeprefix("ref: refs/heads/") if head.startswith("ref: ") else f"detached {head[:12]}"
        gone = "" if path.exists() else ", missing: `git worktree prune`"
        out.append(f"{one_line(str(path))} [{one_line(branch)}{gone}]")
    return out


def own_state_dir(cwd: Path) -> str:
    """The status line our own state dir makes when it is untracked (``?? .supervise/``)."""
    state = os.environ.get("SUPERVISE_STATE_DIR", "")
    try:
        rel = Path(state).relative_to(cwd) if state else None
    except ValueError:
        rel = None
    return f"?? {rel.as_posix()}/" if rel else ""


def main(calls: Calls | None = None) -> int:
    """Print the ``## Repository`` section (nothing outside git); exits 0. ``calls``: the git
    calls the program started already with the default options (:mod:`repo.calls`)."""
    options = stage_options()
    max_status = opt_int(options, "max_status", 20)
    commits = opt_int(options, "commits", 3)
    timeout = opt_float(options, "timeout", 5.0)
    untracked = options.get("untracked", "normal")
    if untracked not in UNTRACKED:
        warn(f"option untracked must be one of {', '.join(UNTRACKED)} (got {untracked!r}); using normal")
        untracked = "normal"
    cwd = Path.cwd()
    if calls is None:
        try:
            calls = Calls(str(untracked), commits, timeout, str(cwd))
        except OSError:
            return 0  # no git: nothing to say
    deadline, rev, status, log = calls.deadline, calls.rev, calls.status, calls.log
    rc, out, err = finish(rev, deadline - time.monotonic())
    s_rc, s_out, s_err = finish(status, deadline - time.monotonic())
    l_rc, l_out, l_err = finish(log, deadline - time.monotonic()) if log else (0, b"", b"")
    if rc != 0:
        refused = failure("git rev-parse", rc, err)
        if refused:  # a checkout git refuses (another uid's): said, never an empty ok
            _write(["## Repository", refused])
        return 0  # outside git: silent
    git_dir_s, common_s = (out.decode("utf-8", "replace").splitlines() + ["", ""])[:2]
    git_dir = Path(git_dir_s)
    common_dir = Path(common_s) if os.path.isabs(common_s) else (cwd / common_s)

    lines = ["## Repository"]
    if s_rc is None:
        lines.append(f"git status did not finish within {timeout:g} s (huge tree? set the "
                     "untracked option to \"no\")")
        headers, changes = {}, []
    elif s_rc != 0:
        lines.append(failure("git status", s_rc, s_err) or f"git status failed (exit {s_rc})")
        headers, changes = {}, []
    else:
        headers, changes = parse_status(s_out)
        changes = [c for c in changes if c != own_state_dir(cwd)]
    head = headers.get("branch.head")
    if head:
        head = one_line(head)  # a branch name is untrusted text (git allows ESC, not LF)
        branch = (f"detached at {one_line(headers.get('branch.oid', '?')[:12])}"
                  if head == "(detached)" else head)
        if headers.get("branch.oid") == "(initial)":
            branch += " (no commits yet)"
        up = one_line(headers.get("branch.upstream", ""))
        if up:
            ab = headers.get("branch.ab", "")
            ahead, behind = (ab.split() + ["+0", "-0"])[:2] if ab else ("?", "?")
            track = f"{up}: ahead {ahead.lstrip('+')}, behind {behind.lstrip('-')}" if ab else f"{up} (gone)"
            lines.append(f"Branch: {branch}, tracking {track}")
        else:
            lines.append(f"Branch: {branch} (no upstream)")
    lines += [f"In progress: {op}" for op in in_progress(git_dir)]
    if s_rc == 0:
        if changes:
            lines.append(f"Changes ({len(changes)}):")
            lines += [f"  {c}" for c in changes[:max_status]]
            if len(changes) > max_status:
                lines.append(f"  ... and {len(changes) - max_status} more (`git status`)")
        else:
            lines.append("Working tree clean")
    stash = headers.get("stash")
    if stash and stash != "0":
        lines.append(f"Stash: {stash} entr{'y' if stash == '1' else 'ies'}")
    log_failed = failure("git log", l_rc, l_err)
    if log_failed and b"does not have any commits" not in l_err:
        lines.append(log_failed)
    if l_rc == 0 and l_out.strip():
        lines.append("Recent commits:")
        lines += [f"  {one_line(c).replace(chr(9), ' ', 1).replace(chr(9), ' | ', 1)}"
                  for c in l_out.decode("utf-8", "replace").split("\n") if c]
    trees = worktrees(git_dir, common_dir)
    if trees:
        lines.append("Other worktrees:")
        lines += [f"  {t}" for t in trees]
    _write(lines)
    return 0


def _write(lines: list[str]) -> None:
    sys.stdout.buffer.write(("\n".join(lines) + "\n").encode("utf-8", "replace"))
