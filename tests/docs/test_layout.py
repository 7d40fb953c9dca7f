"""The house's layout holds: a short root, wings with a purpose, no import circle, and
the wire contract (navarch/report/) walled off from the rest, since it ships to nodes."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "navarch"

#: The modules directly under navarch/: each is shared by several wings. A new module
#: belongs in the wing whose job it shares; add it here only if no wing fits.
ROOT_MODULES = {
    "__init__",
    "__main__",
    "actor",
    "capabilities",
    "errors",
    "extras",
    "history",
    "inventory",
    "logs",
    "outcome",
    "plugins",
    "redact",
    "resources",
    "templating",
    "textsafe",
}

#: What navarch/report/ may import besides the standard library: itself, the error
#: tree, rfc8785, which the agent bundle vendors (navarch.agent.bundle), and orjson,
#: which signing uses only where it is installed (the bundle falls back to json).
REPORT_MAY_IMPORT = ("navarch.report", "navarch.errors", "rfc8785", "orjson")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, *, top_level_only: bool) -> set[str]:
    """Modules `path` imports (at module level, or anywhere), with `from X import y`
    counted as both X and X.y, so a submodule import is an edge to it."""
    tree = ast.parse(path.read_text())
    # `if TYPE_CHECKING:` imports never run: no edge at run time.
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = []
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    package = (
        _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    )
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    [*package.split(".")[: len(package.split(".")) - node.level + 1], base]
                ).strip(".")
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PKG.rglob("*.py")}
    return {
        # A module's own packages are imported before it anyway: no edge, no circle.
        name: {
            m
            for m in _imports(path, top_level_only=False)
            if m in modules and m != name and not name.startswith(m + ".")
        }
        for name, path in modules.items()
    }


def test_the_root_holds_only_the_modules_every_wing_shares() -> None:
    found = {p.stem for p in PKG.glob("*.py")}
    assert found == ROOT_MODULES, (
        f"new at the root: {sorted(found - ROOT_MODULES)}; gone: {sorted(ROOT_MODULES - found)}"
    )


def test_every_wing_says_what_it_is_for() -> None:
    for init in sorted(PKG.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc.split()) >= 5, (
            f"{init.relative_to(ROOT)} needs a docstring saying what the wing is for"
        )


def test_no_module_imports_itself_back_through_a_circle() -> None:
    # Imports inside functions count too: a lazy import that dodges a circle is one.
    graph = _graph()
    state: dict[str, int] = {}
    circles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_the_report_wing_imports_only_itself_the_errors_and_the_standard_library() -> None:
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    bad = {}
    for path in sorted((PKG / "report").rglob("*.py")):
        for name in _imports(path, top_level_only=False):
            top = name.split(".")[0]
            if top in stdlib or name.startswith(REPORT_MAY_IMPORT) or name == "navarch":
                continue
            bad.setdefault(str(path.relative_to(ROOT)), []).append(name)
    assert not bad, f"navarch/report/ ships to nodes; these imports cross its wall: {bad}"
