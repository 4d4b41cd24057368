"""The package's shape, checked from its source: no import cycle, imports one way between its sides,
no function-local import of a project module, and small modules and functions."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "dapo_rllib"
MAX_MODULE_LINES = 650
MAX_FUNCTION_LINES = 80
# Sides that never import the algorithm (dapo_rllib.algorithm): the algorithm drives them.
BELOW_THE_ALGORITHM = ("dapo_rllib.rollout", "dapo_rllib.tasks", "dapo_rllib.models")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """(project module imported, line, whether inside a function) for every import in `path`."""
    tree = ast.parse(path.read_text())
    local = {
        id(node)
        for function in ast.walk(tree)
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
        for node in ast.walk(function)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from package import module` imports the module; `from module import name` the module.
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [name if name in MODULES else node.module for name in names]
        else:
            continue
        found += [(name, node.lineno, id(node) in local) for name in names if name in MODULES]
    return found


GRAPH = {name: sorted({imported for imported, _, _ in _imports(path)}) for name, path in MODULES.items()}


def test_the_walk_sees_the_package():
    # A walk that found nothing would pass every test below.
    assert len(MODULES) > 60 and GRAPH["dapo_rllib.algorithm.dapo"]


def test_no_import_cycle():
    """Every import counts, function-local ones included: a cycle is a cycle however it is hidden."""
    done, on_path = set(), []

    def visit(module: str) -> None:
        if module in on_path:
            cycle = on_path[on_path.index(module) :] + [module]
            pytest.fail("import cycle: " + " -> ".join(cycle))
        if module in done:
            return
        on_path.append(module)
        for imported in GRAPH[module]:
            visit(imported)
        on_path.pop()
        done.add(module)

    for module in GRAPH:
        visit(module)


def test_no_function_local_import_of_a_project_module():
    local = sorted(
        {
            f"{path.relative_to(PACKAGE.parent)}:{line} imports {imported}"
            for path in MODULES.values()
            for imported, line, inside_function in _imports(path)
            if inside_function
        }
    )
    assert not local, "function-local imports of project modules (import them at the top):\n" + "\n".join(local)


@pytest.mark.parametrize("side", BELOW_THE_ALGORITHM)
def test_the_algorithm_is_imported_from_above_only(side):
    reached, todo = set(), [name for name in MODULES if name == side or name.startswith(side + ".")]
    while todo:  # everything the side imports, directly or not
        module = todo.pop()
        for imported in GRAPH[module]:
            if imported not in reached:
                reached.add(imported)
                todo.append(imported)
    assert not sorted(m for m in reached if m.startswith("dapo_rllib.algorithm")), f"{side} reaches the algorithm"


def test_modules_and_functions_are_small():
    too_long = []
    for name, path in MODULES.items():
        source = path.read_text()
        if (lines := source.count("\n")) > MAX_MODULE_LINES:
            too_long.append(f"module {name}: {lines} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"function {name}.{node.name} (line {node.lineno}): {length} lines")
    assert not too_long, (
        f"over {MAX_MODULE_LINES} lines per module or {MAX_FUNCTION_LINES} per function:\n" + "\n".join(too_long)
    )
