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
    "supervisor/_version.py": (1, "the package's own gemini-extension.json, the version's one home "
                                  "(its version field, never context)"),
    "supervisor/commands/mcp.py": (2, "the MCP server's own stdout; /dev/null put on fd 0 "
                                      "while the server reads the client's messages itself"),
    "supervisor/config/_plan.py": (1, "pyproject.toml's [tool.supervise] probe (the config is code)"),
    "supervisor/config/_schema.py": (1, "the packaged default.toml"),
    "supervisor/engine/_cgroup.py": (4, "cgroup files of our own stage trees"),
    "supervisor/engine/_proctable.py": (4, "/proc entries of processes we started (stat, environ, comm)"),
    "supervisor/engine/_reaper.py": (1, "/proc entries of processes we started"),
    "supervisor/engine/_guardian.py": (2, "/dev/null for its stdio and cgroup.kill of our own stage tree"),
    "supervisor/engine/_spawn.py": (4, "/dev/null, cgroup.procs of our own stage, a program's first line (ENOEXEC)"),
    "supervisor/session/_fastpath.py": (4, "the fast path's index entries in the state dir"),
    "supervisor/session/_nudge.py": (1, "the packaged nudge.txt, the nudge line's one home"),
    "supervisor/session/_procinfo.py": (8, "/proc entries for the ancestry walk"),
    "supervisor/session/_transcript.py": (2, "the harness's transcript, scanned for the nudge "
                                             "and counted for Gemini's compression trace "
                                             "(never context)"),
    "supervisor/state/_fsutil.py": (5, "atomic writes, flock, the guarded read of a small user "
                                       "file (config, settings)"),
    "supervisor/state/_intake.py": (1, "THE door"),
    "supervisor/state/_project.py": (2, "git's pointer files and .git/info/exclude"),
    "supervisor/state/_signing.py": (2, "the per-user signing key"),
    "supervisor/state/_statedir.py": (5, "the state dir's own door"),
    "stages/_common.py": (2, "read_regular: git's own small files for the repo stage; "
                             "/dev/null for a stage's child's stdin"),
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


# A plain open (``open(path)``, ``Path.open``/``read_text``/``read_bytes``) waits forever on a
# FIFO and reads a huge file whole: it is allowed only on a file nobody in the tree, a harness
# or the user's config can plant. Everything else is opened with ``os.open`` and a flag that
# cannot block (``O_NONBLOCK``; ``O_DIRECTORY``, ``O_EXCL`` fail on a FIFO instead), then
# ``fstat``-ed and read capped (the door, the state door, ``_fsutil.read_small_file``).
SAFE_OPEN_FLAGS = {"O_NONBLOCK", "O_DIRECTORY", "O_EXCL"}
KERNEL_PREFIXES = ("/proc/", "/sys/")
PLAIN_OPENS = {
    ("supervisor/engine/_cgroup.py", "path / 'cgroup.procs'"): "cgroupfs, our own stage's cgroup",
    ("supervisor/engine/_cgroup.py", "path"): "cgroupfs: cgroup.stat of our own stage's cgroup",
    ("supervisor/engine/_guardian.py", "os.path.join(cgroup, 'cgroup.kill')"):
        "cgroupfs: cgroup.kill of our own stage tree",
    ("supervisor/engine/_spawn.py", "os.path.join(cgroup, 'cgroup.procs')"):
        "cgroupfs: cgroup.procs of our own stage",
    ("supervisor/_version.py", "path"): "the package's own gemini-extension.json (the wheel's "
                                        "copy or the checkout's root; its version field only)",
    ("supervisor/engine/_spawn.py", "program"): "a built-in stage program of our own package "
                                                "(only built-ins are run in a forked child)",
    ("supervisor/session/_nudge.py", "NUDGE_FILE"): "the package's own nudge.txt (the nudge "
                                                    "line), never a tree's",
}
"""The plain opens whose target the census cannot see is a kernel file, ``/dev/null``, a
descriptor or a packaged resource: ``(module, target as source) -> why it cannot be planted``."""


def _flag_names(node: ast.AST) -> set[str]:
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def _assigned(tree: ast.Module, name: str) -> list[ast.AST]:
    out: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name
                                                for t in node.targets):
            out.append(node.value)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) \
                and node.target.id == name:
            out.append(node.value)
    return out


def _unsafe_opens(source: str, rel: str) -> list[str]:
    """The opens in ``source`` (module ``rel``) that could block on a planted FIFO or read a
    planted file unbounded: ``"line: source"`` each, in line order."""
    tree = ast.parse(source)
    bad: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
                and func.value.id == "os" and func.attr == "open":
            target, flags = node.args[0], node.args[1] if len(node.args) > 1 else None
            if ast.unparse(target) == "os.devnull":
                continue
            names = _flag_names(flags) if flags is not None else set()
            if isinstance(flags, ast.Name):
                for value in _assigned(tree, flags.id):
                    names |= _flag_names(value)
            if not names & SAFE_OPEN_FLAGS:
                bad.append((node.lineno, ast.unparse(node)))
            continue
        plain = isinstance(func, ast.Name) and func.id == "open"
        plain |= isinstance(func, ast.Attribute) and func.attr in ("open", "read_text",
                                                                   "read_bytes", "fdopen") \
            and not (isinstance(func.value, ast.Name) and func.value.id in ("StateDir", "cls"))
        if not plain:
            continue
        assert isinstance(func, (ast.Name, ast.Attribute))
        if isinstance(func, ast.Attribute) and func.attr != "fdopen":
            target = func.value  # path.read_text(), path.open()
            if "resources.files" in ast.unparse(target):
                continue  # a packaged resource
        else:
            target = node.args[0]
        shown = ast.unparse(target)
        text = target.values[0] if isinstance(target, ast.JoinedStr) and target.values else target
        if isinstance(text, ast.Constant) and isinstance(text.value, str) \
                and text.value.startswith(KERNEL_PREFIXES):
            continue  # /proc, /sys: the kernel's, never the tree's
        if shown == "os.devnull" or shown.endswith("fd") or shown == "fd":
            continue  # a descriptor we hold
        if (rel, shown) not in PLAIN_OPENS:
            bad.append((node.lineno, ast.unparse(node)))
    return [f"{line}: {text}" for line, text in sorted(bad)]


def test_no_open_can_block_on_a_fifo_or_read_a_planted_file_whole() -> None:
    """A plain ``open()`` of a file of the tree, a harness or the user's config (a harness's
    ``package.json``, Claude Code's ``installed_plugins.json``) fails here: read it through
    the door, the state door or ``_fsutil.read_small_file`` (``O_NONBLOCK``, ``fstat``, a
    cap), or list a file nobody can plant in :data:`PLAIN_OPENS`."""
    found = {}
    for folder in ("supervisor", "stages"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            bad = _unsafe_opens(path.read_text(), path.relative_to(ROOT).as_posix())
            if bad:
                found[path.relative_to(ROOT).as_posix()] = bad
    assert found == {}


def test_the_census_catches_a_plain_open_of_a_tree_file() -> None:
    """The census itself can fail: the opens it was written against (``_ancestry``'s
    ``package.json``, ``_plugins``' ``installed_plugins.json``) are found; a kernel file and a
    guarded open are not."""
    source = ("import os\n\n\ndef f(path, home):\n"
              "    with open(path, 'rb') as f:\n        f.read()\n"
              "    (home / 'installed_plugins.json').read_bytes()\n"
              "    os.open(path, os.O_RDONLY)\n"
              "    open('/proc/self/stat').read()\n"
              "    flags = os.O_RDONLY | os.O_NONBLOCK\n"
              "    os.open(path, flags)\n")
    assert [line.split(":")[0] for line in _unsafe_opens(source, "supervisor/x.py")] == \
        ["5", "7", "8"]


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
