"""The house's rooms (DESIGN section 5): no import cycle anywhere in src/, imports only go down
the layers, no module over 800 lines, and every module says its one job in its first line.

Imports are read from the source (ast), at any depth: inside functions and under
``TYPE_CHECKING`` too, since a cycle hidden in a function is still a cycle. A package's
``__init__`` is its front door (it re-exports its rooms); importing ``pkg.room`` is an edge to
that room only.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "seqlen_balancing"

#: Layers, lowest first: a module may import from its own layer or below, never above
#: (DESIGN: partition/bounds/packing/cost -> planner -> agreement -> distributed -> batch ->
#: verl, cli). Within a layer, the cycle check keeps the order one-way.
LAYERS: list[tuple[str, ...]] = [
    # errors/ is a package: record.py at its bottom, the areas of records above it (see
    # test_the_error_areas_import_only_the_record_room)
    ("_checks", "errors", "data", "collector"),
    # the compiled twins of the planning loops (C extensions: modules with no imports)
    ("_c_differencing", "_c_packing", "_c_balance"),
    # which compiled twins are built and in use
    ("native",),
    # the cost model and the options object: checked values every room above takes
    ("cost",),
    ("options",),
    # one rank's plan on plain integer lists: the rule, bounds, packings, Karmarkar-Karp,
    # the count search, balancing, equal rows, the planner (no torch)
    ("planning",),
    # what the ranks exchange (no torch) and the collectives
    ("agreement",),
    # the whole step across DP ranks: the lock-step model, the global planner, the sampler
    ("global_batch",),
    ("batch",),
    # the package's front door re-exports the rooms below; cli and verl use it as users do
    ("verl", "cli", "__init__", "__main__"),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}
#: C extensions (setup.py): they import no module of the package
NATIVE = {module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.c"))}


def imports_of(name: str) -> set[str]:
    """The package's modules that module ``name`` imports (absolute or relative, any depth)."""
    path = MODULES[name]
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from pkg import room`` is an edge to the room; ``from room import name`` to the room
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES | NATIVE else base
                for alias in node.names
            ]
        for target in targets:
            # the longest prefix that is one of our modules
            parts = target.split(".")
            for cut in range(len(parts), 0, -1):
                candidate = ".".join(parts[:cut])
                if (candidate in MODULES or candidate in NATIVE) and candidate != name:
                    found.add(candidate)
                    break
    return found


GRAPH = {name: imports_of(name) for name in MODULES} | {name: set() for name in NATIVE}


def layer_of(name: str) -> int:
    parts = name.split(".")
    room = "__init__" if len(parts) == 1 else parts[1]
    if name == f"{PACKAGE}.__main__":
        room = "__main__"
    for index, rooms in enumerate(LAYERS):
        if room in rooms:
            return index
    raise AssertionError(f"module {name} is in no layer of LAYERS; add its room")


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of modules (first == last), else ``None`` (DFS)."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_cycle_finder_sees_a_cycle_and_a_clean_graph() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_imports_are_read_at_any_depth_and_relative() -> None:
    # cli/entry.py imports its subcommands inside functions; those edges must be seen
    assert f"{PACKAGE}.cli.step" in GRAPH[f"{PACKAGE}.cli.entry"]
    assert f"{PACKAGE}.batch.micro_batches" in GRAPH[f"{PACKAGE}.batch"]
    assert f"{PACKAGE}.agreement.collective" in GRAPH[f"{PACKAGE}.batch.micro_batches"]


def test_no_import_cycle_in_src() -> None:
    assert find_cycle(GRAPH) is None, f"import cycle: {' -> '.join(find_cycle(GRAPH) or [])}"


def test_imports_only_go_down_the_layers() -> None:
    upward = sorted(
        f"{a} (layer {layer_of(a)}) imports {b} (layer {layer_of(b)})"
        for a, targets in GRAPH.items()
        for b in targets
        if layer_of(b) > layer_of(a)
    )
    assert upward == []


def test_the_error_areas_import_only_the_record_room() -> None:
    """errors/: each area of records imports errors.record and nothing else of the package,
    record imports no area, and the package's __init__ imports them all: so a record's code
    (its place in the registry) follows from __init__'s import order alone."""
    errors, record = f"{PACKAGE}.errors", f"{PACKAGE}.errors.record"
    areas = {name for name in MODULES if name.startswith(f"{errors}.") and name != record}
    assert len(areas) >= 5
    assert {area: GRAPH[area] for area in areas if GRAPH[area] != {record}} == {}
    assert GRAPH[record] == set()
    assert GRAPH[errors] == areas | {record}


def test_verl_and_cli_do_not_import_each_other() -> None:
    crossing = sorted(
        f"{a} -> {b}"
        for a, targets in GRAPH.items()
        for b in targets
        if {a.split(".")[1:2][0] if "." in a else "", b.split(".")[1:2][0] if "." in b else ""}
        == {"verl", "cli"}
    )
    assert crossing == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_is_a_room_a_reader_can_hold(name: str) -> None:
    path = MODULES[name]
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 800, f"{path} has {len(text.splitlines())} lines (at most 800)"
    doc = ast.get_docstring(ast.parse(text), clean=False)
    assert doc, f"{path} has no module docstring"
    first = doc.split("\n", 1)[0].strip()
    # one line that says the job: a sentence of its own, not the start of a longer one
    assert first.endswith((".", "?")), f"{path}: the docstring's first line is not one sentence: {first!r}"
