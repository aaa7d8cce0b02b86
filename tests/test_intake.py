"""The one door for a file whose text becomes context (`supervisor.state._intake`), and the
census of every place the package opens a file, so a new reader cannot bypass the door."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.state._intake import (Got, Refused, Scope, Text, identity, judge, main_checkout,
                                      project_scope, read, read_text, text_of)

ROOT = Path(__file__).resolve().parent.parent

OPENERS = {
    "supervisor/_main.py": (2, "fd 0-2 pointed at /dev/null when the hook starts with them closed"),
    "supervisor/bridges/_install.py": (2, "our own packaged bridge files and the installed copy "
                                          "(compared, never context)"),
    "supervisor/commands/_plugins.py": (1, "Claude Code's installed_plugins.json in the user's home "
                                          "(doctor's plugin check, never context)"),
    "supervisor/commands/mcp.py": (1, "the MCP server's own stdout"),
    "supervisor/config/_plan.py": (1, "pyproject.toml's [tool.supervise] probe (the config is code)"),
    "supervisor/config/_schema.py": (1, "the packaged default.toml"),
    "supervisor/engine/_cgroup.py": (4, "cgroup files of our own stage trees"),
    "supervisor/engine/_proctable.py": (3, "/proc entries of processes we started"),
    "supervisor/engine/_reaper.py": (1, "/proc entries of processes we started"),
    "supervisor/engine/_guardian.py": (2, "/dev/null for its stdio and cgroup.kill of our own stage tree"),
    "supervisor/engine/_spawn.py": (4, "/dev/null, cgroup.procs of our own stage, a program's first line (ENOEXEC)"),
    "supervisor/session/_fastpath.py": (4, "the fast path's index entries in the state dir"),
    "supervisor/session/_ancestry.py": (1, "the harness's installed package.json (its version)"),
    "supervisor/session/_procinfo.py": (8, "/proc entries for the ancestry walk"),
    "supervisor/session/_transcript.py": (1, "the harness's transcript, scanned for the nudge "
                                             "(never context)"),
    "supervisor/state/_fsutil.py": (5, "atomic writes, flock, the guarded read of a small user "
                                       "file (config, settings)"),
    "supervisor/state/_intake.py": (1, "THE door"),
    "supervisor/state/_project.py": (2, "git's pointer files and .git/info/exclude"),
    "supervisor/state/_signing.py": (2, "the per-user signing key"),
    "supervisor/state/_statedir.py": (5, "the state dir's own door"),
    "stages/_common.py": (1, "read_regular: git's own small files for the repo stage"),
    "stages/memory/consolidate.py": (1, "the consolidation log (appended, never read)"),
}
"""Every module that opens a file itself (``open``, ``os.open``, ``Path.open``,
``.read_text``, ``.read_bytes``), how many times, and why that is not text entering the
model's context. Instruction, memory, rules, resource and any other context files are read
through :mod:`supervisor.state._intake` (``read``, ``read_text``, ``judge``) and appear here
only as the door itself."""


def _opens(path: Path) -> int:
    count = 0
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "open":
            count += 1
        elif isinstance(func, ast.Attribute) and func.attr in ("open", "read_text", "read_bytes",
                                                                "fdopen"):
            receiver = func.value
            if isinstance(receiver, ast.Name) and receiver.id in ("StateDir", "cls"):
                continue  # the state dir's door
            count += 1
    return count


def test_every_file_open_is_the_door_or_listed_with_why_it_is_not_context() -> None:
    """A reader of instruction, memory or any other context file that opens the file itself
    (rather than through ``supervisor.state._intake``) fails here: route it through the door,
    or, if its bytes never reach the model, list it in :data:`OPENERS` with the reason."""
    found = {}
    for folder in ("supervisor", "stages"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            count = _opens(path)
            if count:
                found[path.relative_to(ROOT).as_posix()] = count
    assert found == {name: count for name, (count, _why) in OPENERS.items()}


def test_the_context_readers_use_the_door() -> None:
    """The readers issue 20 names import the door (a census of the other direction)."""
    for module in ("stages/instructions/files.py", "stages/instructions/imports.py",
                   "stages/instructions/stage.py", "stages/memory/common.py",
                   "supervisor/session/_nested.py", "supervisor/session/_refresh.py"):
        assert "supervisor.state._intake" in (ROOT / module).read_text(), module


# -- the door's checks ---------------------------------------------------------------------

def scope(tmp_path: Path) -> Scope:
    return project_scope(tmp_path)


def test_a_plain_file_inside_the_project_is_read_and_cleaned(tmp_path: Path) -> None:
    f = tmp_path / "AGENTS.md"
    f.write_bytes(b"\xef\xbb\xbfrule \x1b[8mhidden\x1b[0m\xff\n")
    got = read_text(f, scope(tmp_path))
    assert isinstance(got, Text)
    assert (got.text, got.lossy, got.hidden) == ("rule hidden\ufffd\n", True, 8)
    assert got.ident == (os.stat(f).st_dev, os.stat(f).st_ino)
    assert got.real == os.path.realpath(f)


@pytest.mark.parametrize("target", ["/proc/self/environ", "/dev/zero", "/sys/kernel/uevent_seqnum"])
def test_kernel_and_device_file_systems_are_never_opened(tmp_path: Path, target: str) -> None:
    link = tmp_path / "AGENTS.md"
    link.symlink_to(target)
    for where in (scope(tmp_path), Scope((), anywhere=True)):
        got = read_text(link, where)
        assert isinstance(got, Refused) and got.kind == "location"
        assert got.reason.startswith(f"refused: it resolves to {os.path.realpath(target)}, in ")
        assert got.reason.endswith("(a kernel or device file system); never read")
        assert judge(link, where) == got


def test_a_link_out_of_the_scope_is_refused_with_the_hint(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    link = tmp_path / "p" / "AGENTS.md"
    link.symlink_to("/etc/passwd")
    got = read(link, project_scope(tmp_path / "p", hint="; allow it somehow"))
    assert got == Refused("refused: it resolves to /etc/passwd, outside the project; allow it "
                          "somehow", "location")
    assert isinstance(read(link, Scope((), anywhere=True)), Got)  # a trusted user file may


def test_the_main_checkout_of_a_linked_worktree_is_inside(git_repo: Path, tmp_path: Path) -> None:
    (git_repo / "AGENTS.md").write_text("main rules\n")
    subprocess.run(["git", "-C", str(git_repo), "add", "AGENTS.md"], check=True)
    subprocess.run(["git", "-C", str(git_repo), "commit", "-qm", "x"], check=True)
    linked = tmp_path / "linked"
    subprocess.run(["git", "-C", str(git_repo), "worktree", "add", "-q", str(linked)], check=True)
    assert main_checkout(linked) == os.path.realpath(git_repo)
    assert main_checkout(git_repo) is None
    (linked / "MAIN.md").symlink_to(git_repo / "AGENTS.md")
    got = read_text(linked / "MAIN.md", project_scope(linked))
    assert isinstance(got, Text) and got.text == "main rules\n"


def test_a_fifo_a_socket_and_a_folder_are_named_without_blocking(tmp_path: Path) -> None:
    import socket

    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    try:
        assert read(tmp_path / "fifo", scope(tmp_path)) == Refused(
            "a FIFO, not a regular file; not read", "type")
        assert read(tmp_path / "dir", scope(tmp_path)) == Refused(
            "a directory, not a regular file; not read", "type")
        assert read(tmp_path / "sock", scope(tmp_path)) == Refused(
            "a socket, not a regular file; not read", "type")
        assert judge(tmp_path / "fifo", scope(tmp_path)) == Refused(
            "a FIFO, not a regular file; not read", "type")
    finally:
        sock.close()


def test_size_is_capped_and_a_head_can_be_asked_for(tmp_path: Path) -> None:
    big = tmp_path / "big.md"
    with big.open("wb") as f:
        f.truncate(3 << 30)  # 3 GiB, sparse: one read of the cap, never the whole file
    assert read(big, scope(tmp_path)) == Refused(
        f"too large ({3 << 30} bytes; files over {4 << 20} bytes are not read)", "size")
    head = read(big, scope(tmp_path), cap=10, whole=False)
    assert isinstance(head, Got) and head.data == b"\0" * 10 and head.size == 3 << 30
    assert text_of(head) == Refused("binary (it contains NUL bytes); not read", "binary")


def test_a_link_loop_names_its_reason(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    assert read(tmp_path / "a", scope(tmp_path)) == Refused(
        "a symbolic link loop (too many levels of symbolic links); not read", "loop")
    assert read(tmp_path / "missing", scope(tmp_path)) == Refused("not found", "missing")


def test_no_follow_refuses_a_link(tmp_path: Path) -> None:
    (tmp_path / "real.md").write_text("x\n")
    (tmp_path / "link.md").symlink_to(tmp_path / "real.md")
    assert read(tmp_path / "link.md", scope(tmp_path), follow=False) == Refused(
        "a symbolic link; not read", "link")


def test_a_hard_link_has_the_same_identity(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("one file\n")
    os.link(tmp_path / "AGENTS.md", tmp_path / "CLAUDE.md")
    a, c = read(tmp_path / "AGENTS.md", scope(tmp_path)), read(tmp_path / "CLAUDE.md", scope(tmp_path))
    assert isinstance(a, Got) and isinstance(c, Got) and a.ident == c.ident
    assert identity(tmp_path / "CLAUDE.md") == a.ident
    assert a.real != c.real  # no link to resolve: only the identity tells


def test_a_file_swapped_for_a_link_after_the_check_is_judged_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The location is judged again on the opened file: a link swapped in right after the
    door resolved the path (here, by the resolution itself) is never read."""
    project = tmp_path / "p"
    project.mkdir()
    name = project / "AGENTS.md"
    name.write_text("plain\n")
    resolve = os.path.realpath

    def resolve_then_swap(path: object, *args: object, **kwargs: object) -> str:
        found = resolve(path, *args, **kwargs)  # type: ignore[call-overload]
        if os.fspath(path) == str(name) and not name.is_symlink():  # the attacker's move
            name.unlink()
            name.symlink_to("/etc/passwd")
        return str(found)

    monkeypatch.setattr(os.path, "realpath", resolve_then_swap)
    got = read(name, Scope((os.path.realpath(project),)))
    monkeypatch.undo()
    assert got == Refused("refused: it resolves to /etc/passwd, outside the project", "location")


def test_the_door_stays_off_the_heavy_imports(tmp_path: Path) -> None:
    """The door is on the post-tool and prompt hook paths: no pathlib, re, json, typing."""
    code = ("import sys, supervisor.state._intake as d; "
            "print(sorted({'pathlib','re','json','typing','dataclasses'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "[]"
