"""The ``instructions`` stage, run as a real process on real temporary git repos."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.config._builtins import builtin_argv

STAGE = Path(builtin_argv("instructions")[-1])  # stages/instructions/__main__.py or stages/instructions/__main__.py
_FOREIGN = ("CODEX_HOME", "PI_CODING_AGENT_DIR", "OPENCODE_DISABLE_CLAUDE_CODE_PROMPT",
            "OPENCODE_DISABLE_PROJECT_CONFIG", "SUPERVISE_CWD")


def run_stage(cwd: Path, harness: str = "", *, project: Path | None = None, source: str = "",
              options: dict[str, object] | str | None = None,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in _FOREIGN}
    full.update({
        "SUPERVISE_HARNESS": harness, "SUPERVISE_SOURCE": source, "SUPERVISE_MODE": "full",
        "SUPERVISE_PROJECT_DIR": str(project or cwd), "SUPERVISE_STAGE_NAME": "instructions",
        "SUPERVISE_STATE_DIR": str((project or cwd) / ".supervise"),
        "SUPERVISE_STAGE_OPTIONS": options if isinstance(options, str) else json.dumps(options or {}),
    })
    full.update(env or {})
    proc = subprocess.run([sys.executable, str(STAGE)], cwd=cwd, env=full, capture_output=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode("utf-8"),
                                       proc.stderr.decode("utf-8"))


def headings(out: str) -> list[str]:
    return [line[4:].split(" (")[0] for line in out.splitlines() if line.startswith("### ")]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def tree(git_repo: Path) -> Path:
    """root and sub/ with every file kind; cwd for most tests is ``sub``."""
    write(git_repo / "AGENTS.md", "root agents\n")
    write(git_repo / "CLAUDE.md", "root claude\n")
    write(git_repo / ".claude" / "CLAUDE.md", "root dot-claude\n")
    write(git_repo / "CLAUDE.local.md", "root local\n")
    write(git_repo / "sub" / "AGENTS.md", "sub agents\n")
    write(git_repo / "sub" / "CLAUDE.md", "sub claude\n")
    return git_repo


def test_terminal_emits_the_whole_chain_root_first(tree: Path) -> None:
    out = run_stage(tree / "sub", project=tree, options={"list_nested": False}).stdout
    assert out.startswith("## Instructions\n")
    assert headings(out) == ["AGENTS.md", "CLAUDE.md", ".claude/CLAUDE.md", "CLAUDE.local.md",
                             "sub/AGENTS.md", "sub/CLAUDE.md"]
    assert "root agents" in out and "sub claude" in out


def test_terminal_output_is_deterministic(tree: Path) -> None:
    assert run_stage(tree / "sub", project=tree).stdout == run_stage(tree / "sub", project=tree).stdout


def test_claude_gets_the_agents_chain_only(tree: Path) -> None:
    out = run_stage(tree / "sub", "claude", project=tree).stdout
    assert headings(out) == ["AGENTS.md", "sub/AGENTS.md"]
    assert "Claude Code does not load by itself" in out


def test_claude_md_importing_agents_md_leaves_nothing_to_supply(tree: Path) -> None:
    write(tree / "CLAUDE.md", "root claude\n@AGENTS.md\n")
    write(tree / "sub" / "CLAUDE.md", "See @AGENTS.md for rules.\n")
    assert run_stage(tree / "sub", "claude", project=tree).stdout == ""


def test_symlinked_pair_loads_once(git_repo: Path) -> None:
    write(git_repo / "AGENTS.md", "shared rules\n")
    (git_repo / "CLAUDE.md").symlink_to("AGENTS.md")
    out = run_stage(git_repo)
    assert headings(out.stdout) == ["AGENTS.md"] and out.stdout.count("shared rules") == 1
    for harness in ("claude", "codex", "opencode", "pi"):
        assert run_stage(git_repo, harness).stdout == "", harness


def test_codex_gets_the_claude_chain_and_respects_override(tree: Path) -> None:
    write(tree / "sub" / "AGENTS.override.md", "sub override\n")
    out = run_stage(tree / "sub", "codex", project=tree, options={"list_nested": False}).stdout
    assert headings(out) == ["CLAUDE.md", ".claude/CLAUDE.md", "CLAUDE.local.md", "sub/CLAUDE.md"]
    assert "sub agents" not in out  # the override is that directory's file, Codex loads it


def test_codex_fallbacks_and_byte_cap_from_its_config(tree: Path, tmp_path: Path) -> None:
    codex_home = tmp_path / "codex"
    write(codex_home / "config.toml",
          'project_doc_fallback_filenames = ["CLAUDE.md"]\nproject_doc_max_bytes = 5\n')
    (tree / "AGENTS.md").unlink()  # root: CLAUDE.md is the fallback Codex loads
    out = run_stage(tree / "sub", "codex", project=tree, env={"CODEX_HOME": str(codex_home)},
                    options={"list_nested": False}).stdout
    # Codex's 5-byte budget is spent on the root file, so it never loads sub/AGENTS.md.
    assert headings(out) == [".claude/CLAUDE.md", "CLAUDE.local.md", "sub/AGENTS.md", "sub/CLAUDE.md"]


def test_codex_global_file_is_never_repeated(tree: Path, tmp_path: Path) -> None:
    codex_home = tmp_path / "codex"
    write(codex_home / "AGENTS.md", "codex global\n")
    out = run_stage(tree, "codex", env={"CODEX_HOME": str(codex_home)}, options={"global": True}).stdout
    assert "codex global" not in out
    out = run_stage(tree, "", env={"CODEX_HOME": str(codex_home)}, options={"global": True}).stdout
    assert headings(out)[0] == str(codex_home / "AGENTS.md")


def test_opencode_agents_md_wins_per_directory_claude_md_is_fallback(tree: Path) -> None:
    write(tree / "only" / "CLAUDE.md", "only claude\n")
    out = run_stage(tree / "only", "opencode", project=tree).stdout
    assert headings(out) == ["CLAUDE.md", ".claude/CLAUDE.md", "CLAUDE.local.md"]
    out = run_stage(tree / "only", "opencode", project=tree,
                    env={"OPENCODE_DISABLE_CLAUDE_CODE_PROMPT": "1"}).stdout
    assert headings(out) == ["CLAUDE.md", ".claude/CLAUDE.md", "CLAUDE.local.md", "only/CLAUDE.md"]


def test_pi_one_file_per_directory(tree: Path, tmp_path: Path) -> None:
    agent_dir = tmp_path / "pi-agent"
    write(agent_dir / "AGENTS.md", "pi global\n")
    out = run_stage(tree / "sub", "pi", project=tree, env={"PI_CODING_AGENT_DIR": str(agent_dir)},
                    options={"global": True, "list_nested": False}).stdout
    assert headings(out) == ["CLAUDE.md", ".claude/CLAUDE.md", "CLAUDE.local.md", "sub/CLAUDE.md"]


def test_gemini_loads_gemini_md_and_its_context_file_name_setting(tree: Path) -> None:
    write(tree / "GEMINI.md", "root gemini\n")
    out = run_stage(tree / "sub", "gemini", project=tree, options={"list_nested": False}).stdout
    assert headings(out) == ["AGENTS.md", "CLAUDE.md", ".claude/CLAUDE.md", "CLAUDE.local.md",
                             "sub/AGENTS.md", "sub/CLAUDE.md"]
    assert "root gemini" not in out and "Gemini CLI does not load by itself" in out
    # context.fileName (workspace settings): Gemini now loads AGENTS.md itself, every level
    write(tree / ".gemini" / "settings.json", json.dumps({"context": {"fileName": ["AGENTS.md", "GEMINI.md"]}}))
    out = run_stage(tree / "sub", "gemini", project=tree, options={"list_nested": False}).stdout
    assert headings(out) == ["CLAUDE.md", ".claude/CLAUDE.md", "CLAUDE.local.md", "sub/CLAUDE.md"]
    # the user's settings name a single string; the workspace file wins over it
    (tree / ".gemini" / "settings.json").unlink()
    write(Path(os.environ["HOME"]) / ".gemini" / "settings.json", '{"context": {"fileName": "CLAUDE.md"}}')
    out = run_stage(tree / "sub", "gemini", project=tree, options={"list_nested": False}).stdout
    assert headings(out) == ["AGENTS.md", ".claude/CLAUDE.md", "CLAUDE.local.md", "sub/AGENTS.md"]
    assert "root gemini" not in out  # GEMINI.md is no convention we supply


def test_gemini_settings_that_do_not_parse_keep_the_default(tree: Path) -> None:
    write(tree / ".gemini" / "settings.json", "{not json")
    write(Path(os.environ["HOME"]) / ".gemini" / "settings.json", '{"context": {"fileName": 5}}')
    out = run_stage(tree / "sub", "gemini", project=tree, options={"list_nested": False}).stdout
    assert headings(out)[0] == "AGENTS.md"


@pytest.mark.parametrize("harness", ["gemini", "qwen"])
@pytest.mark.parametrize("plant", ["fifo", "dev-zero", "deep", "huge"])
def test_hostile_workspace_settings_never_block_the_stage(tree: Path, harness: str,
                                                          plant: str) -> None:
    """A planted ``.gemini/settings.json`` (``.qwen/``) FIFO held the stage until the budget
    killed it and every instruction was lost; a link to /dev/zero, a 60,000-deep JSON and a
    3 GiB file are the same kind. Each is ignored: the default names apply."""
    settings = tree / f".{harness}" / "settings.json"
    settings.parent.mkdir()
    if plant == "fifo":
        os.mkfifo(settings)
    elif plant == "dev-zero":
        settings.symlink_to("/dev/zero")
    elif plant == "deep":
        settings.write_text('{"context": ' + "[" * 60000 + "]" * 60000 + "}")
    else:
        with settings.open("wb") as f:
            f.truncate(3 << 30)
    proc = run_stage(tree / "sub", harness, project=tree, options={"list_nested": False})
    assert headings(proc.stdout)[0] == ("CLAUDE.md" if harness == "qwen" else "AGENTS.md")


def test_qwen_loads_qwen_md_and_agents_md_by_default(tree: Path) -> None:
    write(tree / "QWEN.md", "root qwen\n")
    out = run_stage(tree / "sub", "qwen", project=tree, options={"list_nested": False}).stdout
    assert headings(out) == ["CLAUDE.md", ".claude/CLAUDE.md", "CLAUDE.local.md", "sub/CLAUDE.md"]
    assert "Qwen Code does not load by itself" in out
    write(tree / ".qwen" / "settings.json", '{"context": {"fileName": "QWEN.md"}}')
    out = run_stage(tree / "sub", "qwen", project=tree, options={"list_nested": False}).stdout
    assert headings(out)[0] == "AGENTS.md" and "sub/AGENTS.md" in headings(out)


def test_cursor_applies_agents_md_and_root_claude_md_itself(tree: Path) -> None:
    out = run_stage(tree / "sub", "cursor", project=tree).stdout
    assert headings(out) == [".claude/CLAUDE.md", "CLAUDE.local.md", "sub/CLAUDE.md"]
    assert "Nested instruction files" not in out  # Cursor applies nested AGENTS.md itself


def test_grok_loads_the_agents_chain_and_its_override(tree: Path) -> None:
    out = run_stage(tree / "sub", "grok", project=tree, options={"list_nested": False}).stdout
    assert headings(out) == ["CLAUDE.md", ".claude/CLAUDE.md", "CLAUDE.local.md", "sub/CLAUDE.md"]
    write(tree / "sub" / "AGENTS.override.md", "")  # present but empty: Grok loads nothing there
    out = run_stage(tree / "sub", "grok", project=tree, options={"list_nested": False}).stdout
    assert "sub/AGENTS.md" in headings(out)


@pytest.mark.parametrize("harness", ["", "claude", "codex", "opencode", "pi", "gemini", "qwen",
                                     "cursor", "grok"])
def test_subdirectory_session_gets_the_subdirectory_rules_once(git_repo: Path, harness: str) -> None:
    """Every harness: the chain runs root -> SUPERVISE_CWD; what the harness loads itself is
    never in the output, and each file the harness does not load is there exactly once."""
    write(git_repo / "AGENTS.md", "ROOT-RULES\n")
    write(git_repo / "pkg" / "AGENTS.md", "PKG-RULES\n")
    out = run_stage(git_repo, harness, options={"list_nested": False},
                    env={"SUPERVISE_CWD": str(git_repo / "pkg")}).stdout
    loads_agents = harness in ("codex", "opencode", "pi", "qwen", "cursor", "grok")
    for marker in ("ROOT-RULES", "PKG-RULES"):
        assert out.count(marker) == (0 if loads_agents else 1), (harness, marker, out)


def test_imports_cycles_are_broken_and_each_file_emitted_once(git_repo: Path) -> None:
    write(git_repo / "AGENTS.md", "root @docs/a.md\n")
    write(git_repo / "docs" / "a.md", "A imports @b.md\n")
    write(git_repo / "docs" / "b.md", "B imports @a.md and @../AGENTS.md\n")
    out = run_stage(git_repo).stdout
    assert headings(out) == ["AGENTS.md", "docs/a.md", "docs/b.md"]
    assert "### docs/b.md (imported by docs/a.md)" in out


def test_import_hop_limit(git_repo: Path) -> None:
    write(git_repo / "AGENTS.md", "@d1.md\n")
    for i in range(1, 6):
        write(git_repo / f"d{i}.md", f"level {i} @d{i + 1}.md\n")
    write(git_repo / "d6.md", "level 6\n")
    out = run_stage(git_repo, options={"max_import_depth": 2}).stdout
    assert headings(out) == ["AGENTS.md", "d1.md", "d2.md"]
    assert "@d3.md in d2.md: hop limit 2 reached" in out
    assert headings(run_stage(git_repo).stdout)[-1] == "d5.md"  # default limit: 5 hops


def test_imports_inside_code_are_ignored(git_repo: Path) -> None:
    write(git_repo / "AGENTS.md", "\n".join([
        "Real: @real.md", "Span: `@span.md` and ``@two `x` @span2.md``",
        "```sh", "echo @fenced.md", "```", "~~~~", "@tilde.md", "```", "still @tilde2.md", "~~~~",
        "mail me@example.com", "after fence @after.md", ""]))
    for name in ("real", "span", "span2", "fenced", "tilde", "tilde2", "after"):
        write(git_repo / f"{name}.md", f"{name} body\n")
    assert headings(run_stage(git_repo).stdout) == ["AGENTS.md", "real.md", "after.md"]


def test_missing_import_is_named_not_fatal(git_repo: Path) -> None:
    write(git_repo / "AGENTS.md", "see @docs/gone.md, then @here.md.\n")
    write(git_repo / "here.md", "here body\n")
    out = run_stage(git_repo).stdout
    assert headings(out) == ["AGENTS.md", "here.md"]
    assert f"@docs/gone.md in AGENTS.md: not found ({git_repo / 'docs' / 'gone.md'})" in out


def test_outside_project_import_needs_an_allow(git_repo: Path, tmp_path: Path) -> None:
    outside = write(tmp_path / "shared" / "team.md", "team rules\n")
    write(git_repo / "AGENTS.md", f"@{outside}\n@~/personal.md\n")
    write(Path(os.environ["HOME"]) / "personal.md", "personal rules\n")
    out = run_stage(git_repo).stdout
    assert "team rules" not in out and "personal rules" not in out
    assert "outside the project" in out and "allow_outside" in out
    out = run_stage(git_repo, options={"allow_paths": [str(tmp_path / "shared")]}).stdout
    assert "team rules" in out and "personal rules" not in out
    out = run_stage(git_repo, options={"allow_outside": True}).stdout
    assert "team rules" in out and "personal rules" in out


def test_cap_keeps_whole_files_and_names_the_rest(git_repo: Path) -> None:
    write(git_repo / "AGENTS.md", "A" * 10_000 + "\n")
    write(git_repo / "CLAUDE.md", "B" * 10_000 + "\n")
    write(git_repo / "CLAUDE.local.md", "C" * 10_000 + "\n")
    out = run_stage(git_repo, options={"max_bytes": 25_000}).stdout
    assert headings(out) == ["AGENTS.md", "CLAUDE.md"]
    assert "C" * 10 not in out  # never a partial file
    assert f"- {git_repo / 'CLAUDE.local.md'} (10001 bytes)" in out
    assert "within 25000 bytes" in out


def test_default_cap_is_32_kib(git_repo: Path) -> None:
    write(git_repo / "AGENTS.md", "A" * 32_000 + "\n")
    write(git_repo / "CLAUDE.md", "B" * 1_000 + "\n")
    out = run_stage(git_repo).stdout
    assert headings(out) == ["AGENTS.md"] and "within 32768 bytes" in out


def test_non_utf8_is_decoded_with_replacement_and_flagged(git_repo: Path) -> None:
    (git_repo / "AGENTS.md").write_bytes(b"caf\xe9 \xff rules\n")
    proc = run_stage(git_repo)  # run_stage decodes strictly: the output is valid UTF-8
    assert "caf\ufffd \ufffd rules" in proc.stdout
    assert "### AGENTS.md (not valid UTF-8: decoded with replacement characters)" in proc.stdout


def test_paths_with_spaces_and_non_ascii(tmp_path: Path) -> None:
    project = tmp_path / "my proj" / "ünïcode"
    project.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    write(project / "AGENTS.md", "root @docs/my\\ file.md and @docs/ñ.md\n")
    write(project / "docs" / "my file.md", "spaced body\n")
    write(project / "docs" / "ñ.md", "eñe body\n")
    write(project / "sub dir" / "AGENTS.md", "sub body\n")
    out = run_stage(project / "sub dir", project=project).stdout
    assert headings(out) == ["AGENTS.md", "docs/my file.md", "docs/ñ.md", "sub dir/AGENTS.md"]


def test_compact_reemits_what_the_harness_does_not_keep(tree: Path) -> None:
    out = run_stage(tree, "claude", source="compact").stdout
    assert "Re-emitted after compaction" in out
    assert headings(out) == ["AGENTS.md"]  # CLAUDE.md is in Claude's system prompt: kept


def test_silent_when_nothing_to_supply(git_repo: Path) -> None:
    write(git_repo / "CLAUDE.md", "claude only\n")
    write(git_repo / "AGENTS.md", "  \n\n")  # empty files are skipped
    proc = run_stage(git_repo, "claude")
    assert proc.stdout == "" and proc.stderr == ""


def test_silent_outside_any_instruction_files(tmp_path: Path) -> None:
    assert run_stage(tmp_path).stdout == ""


def test_bad_options_warn_and_use_defaults(tree: Path) -> None:
    proc = run_stage(tree, "claude", options="{not json")
    assert "not valid JSON" in proc.stderr and headings(proc.stdout) == ["AGENTS.md"]
    proc = run_stage(tree, "claude", options={"max_bytes": "big"})
    assert "max_bytes" in proc.stderr and headings(proc.stdout) == ["AGENTS.md"]


def test_supply_option_and_extra_files(tree: Path) -> None:
    write(tree / "docs" / "extra.md", "extra body\n")
    out = run_stage(tree, options={"supply": ["claude"], "files": ["docs/extra.md"]}).stdout
    assert headings(out) == ["CLAUDE.md", ".claude/CLAUDE.md", "CLAUDE.local.md", "docs/extra.md"]


def test_nested_files_are_listed_for_harnesses_without_a_read_hook(tree: Path) -> None:
    write(tree / "pkg" / "deep" / "AGENTS.md", "deep\n")
    out = run_stage(tree, "codex").stdout
    assert "Nested instruction files" in out
    assert "- pkg/deep/AGENTS.md" in out and "- sub/AGENTS.md" in out
    assert "Nested instruction files" not in run_stage(tree, "claude").stdout


def test_nested_listing_order_and_folders_match_the_path_rules(tree: Path) -> None:
    """The listing of nested files is built from git's listing with plain strings (a
    20,000-file repository made 40,000 Path objects, the digest's largest cost): it lists the
    same folders in the same order as Path would. Order is by path component ("a-b" after
    "a/b", where a plain string sort puts it first); a folder holding only folders counts;
    an untracked nested repository (git lists it as "vendored/") is not a folder of ours; an
    ignored or untracked AGENTS.md beside a listed file counts; a name with an escape
    sequence is shown on one clean line."""
    for rel in ("a/b/AGENTS.md", "a/b/m.py", "a-b/AGENTS.md", "a-b/m.py", "a.b/AGENTS.md",
                "a.b/m.py", "outer/AGENTS.md", "outer/inner/deeper/m.py", "ign/AGENTS.md",
                "ign/m.py", "new/AGENTS.override.md", "new/AGENTS.md", "new/m.py",
                "vendored/AGENTS.md", "vendored/x.py", "esc\x1b[31mred/AGENTS.md",
                "esc\x1b[31mred/m.py", "caf\u00e9/AGENTS.md", "caf\u00e9/m.py"):
        write(tree / rel, "x\n")
    git = ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", str(tree / "vendored")], check=True)
    write(tree / ".gitignore", "ign/AGENTS.md\n")
    subprocess.run([*git, "add", "a", "a-b", "outer", "ign", ".gitignore"], check=True)
    subprocess.run([*git, "commit", "-qm", "tracked"], check=True)  # a.b/, new/, ... untracked
    out = run_stage(tree, "codex").stdout
    listed = out.split("before working in it):\n", 1)[1].splitlines()
    assert listed == ["- a/b/AGENTS.md", "- a-b/AGENTS.md", "- a.b/AGENTS.md",
                      "- caf\u00e9/AGENTS.md", "- esc\\x1b[31mred/AGENTS.md", "- ign/AGENTS.md",
                      "- new/AGENTS.override.md", "- outer/AGENTS.md", "- sub/AGENTS.md"]
    assert "\x1b" not in out and "vendored" not in out


def test_project_dir_reached_through_a_symlink(tree: Path, tmp_path: Path) -> None:
    link = tmp_path / "link-to-repo"
    link.symlink_to(tree)
    out = run_stage(link / "sub", "claude", project=tree).stdout
    assert headings(out) == ["AGENTS.md", "sub/AGENTS.md"]


@pytest.mark.parametrize(("version", "supplied"), [("", True), ("2.1.197", True), ("2.1.280", True),
                                                   ("2.1.281", False), ("2.1.332", False)])
def test_claude_loads_agents_md_itself_from_2_1_281(git_repo: Path, version: str,
                                                    supplied: bool) -> None:
    """The harness table's era for Claude Code: from 2.1.281 it loads AGENTS.md itself when
    no CLAUDE file is at or above cwd, so the digest does not hand it a second copy; an older
    or unknown version gets it from the digest."""
    write(git_repo / "AGENTS.md", "root agents\n")
    write(git_repo / "sub" / "AGENTS.md", "sub agents\n")
    out = run_stage(git_repo / "sub", "claude", project=git_repo,
                    env={"SUPERVISE_HARNESS_VERSION": version}).stdout
    assert headings(out) == (["AGENTS.md", "sub/AGENTS.md"] if supplied else []), out


@pytest.mark.parametrize("where", ["CLAUDE.md", ".claude/CLAUDE.md", "CLAUDE.local.md",
                                   "sub/CLAUDE.md"])
def test_a_claude_file_on_the_way_keeps_claude_from_loading_agents_md(git_repo: Path,
                                                                      where: str) -> None:
    """One non-empty CLAUDE file from the root down to cwd and Claude Code 2.1.332 loads no
    AGENTS.md at all (proved with the real CLI): the digest supplies them."""
    write(git_repo / "AGENTS.md", "root agents\n")
    write(git_repo / "sub" / "AGENTS.md", "sub agents\n")
    write(git_repo / where, "claude rules\n")
    out = run_stage(git_repo / "sub", "claude", project=git_repo,
                    env={"SUPERVISE_HARNESS_VERSION": "2.1.332"}).stdout
    assert headings(out) == ["AGENTS.md", "sub/AGENTS.md"], out


def test_an_empty_claude_md_does_not_count(git_repo: Path) -> None:
    write(git_repo / "AGENTS.md", "root agents\n")
    write(git_repo / "CLAUDE.md", "")
    out = run_stage(git_repo, "claude", env={"SUPERVISE_HARNESS_VERSION": "2.1.332"}).stdout
    assert headings(out) == [], out
