"""The layout shows the architecture: every module sits in a room, imports go one way, no cycles.

The map of rooms and what each may import is docs/architecture.md; :data:`LAYERS` below is
the same map as data. The checks are static (``ast``, no import), over ``supervisor/`` and
``stages/``, and count every import statement wherever it stands: at the top of a module,
inside a function (the lazy imports that keep the hook's hot path lean) or under
``if TYPE_CHECKING:``. A lazy import is still a dependency: it only moves the cost, so it
must follow the same direction. Imports by computed name (``importlib.import_module(f"...")``,
the public door's PEP 562 table, the verb dispatch in ``_main``) are not seen; they all point
downward from the door or from the bridges.

The last test imports each module alone in a fresh interpreter state, so a module that only
works after another one happened to be imported first fails here.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("supervisor._errors", "supervisor._exitcodes", "supervisor._version",
              "supervisor._sanitize", "supervisor._interrupts", "supervisor._record",
              "supervisor._hashing", "supervisor._jsontext", "supervisor._home",
              "supervisor._git", "supervisor._harnesses")),
    ("state", ("supervisor.state",)),
    ("adapters", ("supervisor.adapters",)),
    ("config", ("supervisor.config",)),
    ("engine", ("supervisor.engine",)),
    ("session", ("supervisor.session",)),
    ("bridges", ("supervisor.bridges",)),
    ("commands", ("supervisor.commands",)),
    ("door", ("supervisor", "supervisor.__main__", "supervisor._main")),
)
"""The rooms, lowest first. A module may import modules of its own room and of rooms listed
before it, never of a room listed after it. A room is a list of module names; a name covers
its submodules too, except ``supervisor`` itself (the door), and the longest name wins."""

STAGE_ROOMS_ALLOWED = ("base", "state", "config", "session")
"""The supervisor rooms a stage program may import (it runs as a subprocess of the engine)."""


def _modules(top: str) -> dict[str, Path]:
    """``{dotted name: file}`` for every ``.py`` file under ``ROOT/top``; for ``stages`` the
    names are relative to ``stages/`` (a stage runs with that folder on ``sys.path``)."""
    base = ROOT / top
    out = {}
    for path in sorted(base.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(base if top == "stages" else ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


SUPERVISOR = _modules("supervisor")
STAGES = _modules("stages")


def _imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """``(imported module, line)`` for every import in ``path`` that names a module of
    ``known`` (``from x import y`` counts ``x.y`` when that is a module, else ``x``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            # `import supervisor` alone loads the door's namespace, which every submodule import
            # loads anyway (doctor inspects it); `from supervisor import name` is an edge
            targets = [alias.name for alias in node.names if alias.name != "supervisor"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[:len(parts) - (node.level - 1)]
                stem = ".".join([*parts, *([node.module] if node.module else [])])
            else:
                stem = node.module or ""
            targets = [f"{stem}.{alias.name}" if f"{stem}.{alias.name}" in known else stem
                       for alias in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target, node.lineno


def _graph(known: dict[str, Path]) -> dict[str, dict[str, int]]:
    return {name: dict(_imports(name, path, known)) for name, path in known.items()}


def _room(module: str) -> str:
    best, room = "", ""
    for layer, names in LAYERS:
        for prefix in names:
            covers = module == prefix or (prefix != "supervisor" and module.startswith(prefix + "."))
            if covers and len(prefix) > len(best):
                best, room = prefix, layer
    return room


RANK = {layer: i for i, (layer, _) in enumerate(LAYERS)}


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    edges = [f"{a} -> {b} (line {graph[a][b]})" for a in cycle for b in graph[a] if b in cycle]
    return "; ".join(edges)


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The checker itself: a two-module loop and a three-module loop are found, a chain is not."""
    graph = {"a": {"b": 1}, "b": {"a": 2}, "c": {"d": 1}, "d": {"e": 1}, "e": {"c": 1},
             "f": {"a": 1}, "g": {}}
    assert sorted(_cycles(graph)) == [["a", "b"], ["c", "d", "e"]]
    assert _cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {}}) == []


def test_every_module_sits_in_a_room() -> None:
    """A new module must be placed on the map (here and in docs/architecture.md)."""
    homeless = sorted(name for name in SUPERVISOR if not _room(name))
    assert not homeless, f"place these in a room of LAYERS and docs/architecture.md: {homeless}"


def test_no_import_cycles() -> None:
    """No module reaches itself through imports, lazy and type-only ones included."""
    for graph in (_graph(SUPERVISOR), _graph(STAGES)):
        cycles = _cycles(graph)
        assert not cycles, "\n".join(_describe(c, graph) for c in cycles)


def test_imports_go_down_the_rooms() -> None:
    """A module imports its own room or a room below it (data flows payload -> routing ->
    digest plan -> engine -> envelope; the verbs and the door sit on top)."""
    graph = _graph(SUPERVISOR)
    upward = [f"{a} ({_room(a)}) imports {b} ({_room(b)}) at line {line}"
              for a, targets in graph.items() for b, line in targets.items()
              if RANK.get(_room(b), -1) > RANK.get(_room(a), len(RANK))]
    assert not upward, "\n".join(upward)


def test_stages_and_the_package_keep_apart() -> None:
    """The package runs stage programs by path (spawned, or run by a forked child) and never
    imports them; a stage imports only the lower rooms of the package (never a verb, a bridge
    or the door)."""
    for name, path in SUPERVISOR.items():
        for target, line in _imports(name, path, {**STAGES, "stages": ROOT / "stages"}):
            raise AssertionError(f"{name} imports the stage module {target} (line {line})")
    wrong = []
    for name, path in STAGES.items():
        for target, line in _imports(name, path, SUPERVISOR):
            if _room(target) not in STAGE_ROOMS_ALLOWED:
                wrong.append(f"stages: {name} imports {target} ({_room(target)}) at line {line}")
    assert not wrong, "\n".join(wrong)


def _guarded_own_imports(path: Path) -> Iterator[int]:
    """Lines of ``try:`` blocks in ``path`` that import one of our modules (relative, or
    ``supervisor...``, or ``importlib.import_module("supervisor...")``) under an
    ``except ImportError`` / ``ModuleNotFoundError`` handler."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        caught = set()
        for handler in node.handlers:
            kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
            caught |= {k.id for k in kinds if isinstance(k, ast.Name)}
        if not caught & {"ImportError", "ModuleNotFoundError"}:
            continue
        for inner in (n for stmt in node.body for n in ast.walk(stmt)):
            own = (isinstance(inner, ast.ImportFrom)
                   and (inner.level > 0 or (inner.module or "").startswith("supervisor")))
            own = own or (isinstance(inner, ast.Import)
                          and any(a.name.startswith("supervisor") for a in inner.names))
            own = own or (isinstance(inner, ast.Call) and ast.unparse(inner.func).endswith(
                "import_module") and "supervisor" in ast.unparse(inner))
            if own:
                yield node.lineno
                break


def test_no_import_guard_wraps_our_own_modules() -> None:
    """Our own modules are always there: a guard that catches their ImportError only hides
    a broken install (an internal error with its crash log says it), or is dead code. Four
    wrapped them: the verb dispatch's "not available in this build" and three in the stages
    ("without watchkeeper", though those stages import the package unguarded elsewhere)."""
    found = [f"{path.relative_to(ROOT)}:{line}" for path in [*SUPERVISOR.values(), *STAGES.values()]
             for line in _guarded_own_imports(path)]
    assert not found, found


def test_the_supervising_process_never_imports_a_stage(tmp_path: Path) -> None:
    """Built-in stages are forked from the supervising process (issue 26), and only the forked
    child runs the program and imports its modules: ``python -X importtime`` of a digest that
    runs ``instructions`` and ``repo`` names none of the stages' modules on the supervisor's
    own stderr (a forked child's import log goes to its stderr pipe, the stage log)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**_env(), "SUPERVISE_STATE_DIR": str(tmp_path / "state")}
    env.pop("PYTHONPATH")
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
    (repo / "AGENTS.md").write_text("# Rules\n")
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "supervisor", "digest"],
                          cwd=repo, capture_output=True, text=True, timeout=60, env=env)
    assert "## Instructions" in proc.stdout and "## Repository" in proc.stdout, proc.stdout
    imported = {line.rpartition("|")[2].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:")}
    tops = {name.split(".")[0] for name in STAGES}
    assert imported and not {n for n in imported if n.split(".")[0] in tops}


def test_each_module_imports_alone() -> None:
    """Every module imports in an interpreter where nothing of ours was imported before it
    (one child process; ``sys.modules`` is emptied of our modules before each import)."""
    names = sorted(n for n in SUPERVISOR if not n.endswith("__main__"))  # __main__ runs the CLI
    programs = {p.stem for p in (ROOT / "stages").glob("[!_]*.py")}
    helpers = sorted(n for n in STAGES if n not in programs and not n.endswith("__main__"))
    code = (
        "import importlib, json, sys\n"
        "mine = ('supervisor', *(n.split('.')[0] for n in STAGE_NAMES))\n"
        "failed = {}\n"
        "for name in NAMES:\n"
        "    for key in [k for k in sys.modules if k.split('.')[0] in mine]:\n"
        "        del sys.modules[key]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except BaseException as err:\n"
        "        failed[name] = f'{type(err).__name__}: {err}'\n"
        "print(json.dumps(failed))\n"
    ).replace("STAGE_NAMES", repr(helpers)).replace("NAMES", repr([*names, *helpers]))
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT / "stages", capture_output=True,
                          text=True, timeout=120, env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == {}


def _env() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT / "stages"), env.get("PYTHONPATH"))))
    return env


def test_built_in_stages_are_the_programs_not_their_helpers() -> None:
    """``stages/<name>.py`` and ``stages/<name>/__main__.py`` are built-ins; a helper
    (``_common``, a stage package's modules) is not, and naming one is a config error."""
    import pytest

    from supervisor.config._builtins import builtin_argv, list_builtins
    from supervisor._errors import ConfigError

    assert list_builtins() == ["instructions", "memory", "network", "repo", "summary"]
    for name in list_builtins():
        assert Path(builtin_argv(name)[-1]).is_file()
    for helper in ("_common", "instructions.files", "../stages/repo", ""):
        with pytest.raises(ConfigError, match="unknown builtin stage"):
            builtin_argv(helper)
