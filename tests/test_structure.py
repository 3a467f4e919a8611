"""The harness's modules import each other in one direction only: no circle, also through the
imports made inside functions (a lazy import hides a circle; it does not remove it)."""

import ast

from harness.paths import ROOT


def harness_imports() -> dict[str, set[str]]:
    graph = {}
    for path in sorted((ROOT / "harness").glob("*.py")):
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "harness":
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harness."):
                found.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("harness.")}
        graph[path.stem] = found - {path.stem}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    found, done = [], set()

    def visit(module, trail):
        if module in trail:
            found.append(trail[trail.index(module):] + [module])
            return
        if module in done:
            return
        for nxt in sorted(graph.get(module, ())):
            visit(nxt, trail + [module])
        done.add(module)

    for module in graph:
        visit(module, [])
    return found


def test_no_import_circle_in_the_harness():
    assert not circles(harness_imports())


def test_the_circle_check_finds_a_lazy_circle():
    graph = harness_imports()
    graph["experiments"] = graph["experiments"] | {"steps"}       # the lazy import that used to be there
    assert any(set(circle) == {"experiments", "steps"} for circle in circles(graph))
