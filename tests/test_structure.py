"""The harness's shape: modules grouped in wings, each wing importing only the wings below it (also
through imports made inside functions: a lazy import hides an upward arrow, it does not remove it),
no import circle, no module reaching into another's private names, no module over ~500 lines, and
every module serving a command (reachable from ``ladder`` or the GPU child process), not only tests."""

import ast

import pytest

from harness.core.paths import ROOT

# Bottom to top. A wing may import its own modules and those of the wings before it.
WINGS = ("core", "compiler", "model", "timeline", "gpu", "report", "cli")
ENTRY_POINTS = ("harness.cli", "harness.gpu.child", "harness.compiler.fa4_build")   # `ladder`, its child processes
MAX_LINES = 500


def module_name(path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, ast.Module]:
    return {module_name(p): ast.parse(p.read_text()) for p in sorted((ROOT / "harness").rglob("*.py"))}


def imports(tree: ast.Module, known) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) for every harness import, at any depth; ``from
    harness.x import y`` where y is itself a module counts as importing harness.x.y."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harness"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.append((sub, []) if sub in known else (node.module, [alias.name]))
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.startswith("harness")]
    return found


def graph(trees) -> dict[str, set[str]]:
    return {name: {m for m, _ in imports(tree, trees)} - {name} for name, tree in trees.items()}


def wing(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in WINGS else None


def upward(g: dict[str, set[str]]) -> list[str]:
    return [f"{a} ({wing(a)}) imports {b} ({wing(b)})" for a, deps in g.items() for b in deps
            if wing(a) and wing(b) and WINGS.index(wing(b)) > WINGS.index(wing(a))]


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    found, done = [], set()

    def visit(module, trail):
        if module in trail:
            found.append(trail[trail.index(module):] + [module])
            return
        if module in done:
            return
        for nxt in sorted(g.get(module, ())):
            visit(nxt, trail + [module])
        done.add(module)

    for module in g:
        visit(module, [])
    return found


def test_every_module_sits_in_a_wing():
    loose = [m for m in modules() if m not in ("harness",) and wing(m) is None]
    assert not loose, f"harness modules outside the wings {WINGS}: {loose}"


def test_no_wing_imports_a_wing_above_it():
    trees = modules()
    assert len(trees) > len(WINGS)
    assert not upward(graph(trees))


def test_the_wing_check_finds_an_upward_import():
    g = graph(modules())
    g["harness.core.results"] = g["harness.core.results"] | {"harness.report.tables"}
    assert upward(g) == ["harness.core.results (core) imports harness.report.tables (report)"]


def test_no_import_circle_in_the_harness():
    assert not circles(graph(modules()))


def test_the_circle_check_finds_a_lazy_circle():
    g = graph(modules())
    g["harness.core.experiments"] = g["harness.core.experiments"] | {"harness.core.steps"}   # steps imports experiments
    assert any(set(c) == {"harness.core.experiments", "harness.core.steps"} for c in circles(g))


def test_no_module_imports_another_modules_private_names():
    trees = modules()
    private = [f"{name} takes {mod}.{n}" for name, tree in trees.items()
               for mod, names in imports(tree, trees) for n in names if n.startswith("_")]
    private += [f"{name} uses {node.value.id}.{node.attr}" for name, tree in trees.items() for node in ast.walk(tree)
                if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name) and any(m.endswith("." + node.value.id) for m in trees)]
    assert not private


@pytest.mark.parametrize("path", sorted((ROOT / "harness").rglob("*.py")), ids=lambda p: module_name(p))
def test_no_module_is_over_the_line_budget(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)}: {lines} lines; split it along a seam"


def test_every_module_serves_a_command():
    """Reachable by imports from an entry point: a module only tests use belongs beside the tests."""
    trees = modules()
    g = graph(trees)
    seen, todo = set(), list(ENTRY_POINTS)
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += sorted(g.get(m, ()))
    wings = {f"harness.{w}" for w in WINGS}
    unreached = sorted(set(trees) - seen - wings - {"harness", "harness.cli.__main__"})
    assert not unreached, f"imported by no command, only by tests: {unreached}"
