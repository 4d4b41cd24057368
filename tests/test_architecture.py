"""The package's shape, checked from its source: no import cycle between modules or between subpackages,
imports one way between its sides, no function-local import of a project module, and small modules and
functions. And the suite's: each test file in the folder of the subpackage it tests, helpers shared through
tests.support only."""

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


def _part(module: str) -> str:
    """The node of `module` in the graph between the package's parts: the subpackage it is in (its first
    component under dapo_rllib, without the prefix: "models" for dapo_rllib.models.tiny.recipes).

    A top-level module (dapo_rllib.columns, dapo_rllib.registry) is a node of its own, and so is the package's
    `__init__` ("dapo_rllib"): they sit at opposite ends (columns and settings under every subpackage, the
    registry above the algorithm it registers), so one node for all of them would join the bottom to the top
    and report a cycle no import makes. Cycles among them are module cycles, which `test_no_import_cycle`
    finds."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _part_imports() -> dict[tuple[str, str], list[str]]:
    """(importing part, imported part): ["models/lora.py imports rollout.weight_sync", ...], every import
    from one part into another."""
    found = {}
    for name, path in MODULES.items():
        for imported in GRAPH[name]:
            if _part(name) != _part(imported):
                why = f"{path.relative_to(PACKAGE)} imports {imported.removeprefix(PACKAGE.name + '.')}"
                found.setdefault((_part(name), _part(imported)), []).append(why)
    return found


PART_IMPORTS = _part_imports()


def _cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """One cycle per edge that closes one in a depth-first walk of `graph`, as [a, b, ..., a]: none when
    `graph` has none, and each cycle named where the walk meets it."""
    cycles, done, on_path = [], set(), []

    def visit(node: str) -> None:
        if node in on_path:
            cycles.append(on_path[on_path.index(node) :] + [node])
            return
        if node in done:
            return
        on_path.append(node)
        for successor in graph.get(node, []):
            visit(successor)
        on_path.pop()
        done.add(node)

    for node in graph:
        visit(node)
    return cycles


def test_the_walk_sees_the_package():
    # A walk that found nothing would pass every test below.
    assert len(MODULES) > 60 and GRAPH["dapo_rllib.algorithm.dapo"]


def test_no_import_cycle():
    """Every import counts, function-local ones included: a cycle is a cycle however it is hidden."""
    cycles = _cycles(GRAPH)
    assert not cycles, "\n".join("import cycle: " + " -> ".join(cycle) for cycle in cycles)


def test_no_import_cycle_between_subpackages():
    """The subpackages are layers (tasks and models under rollout, rollout under the doctor, the doctor under
    the algorithm, ...): no module cycle is needed for two of them to import each other, and once they do
    neither can be read, tested or replaced without the other."""
    assert ("algorithm", "rollout") in PART_IMPORTS  # a walk that found no edge would pass
    graph = {}
    for importer, imported in PART_IMPORTS:
        graph.setdefault(importer, []).append(imported)
    cycles = [
        "subpackage cycle: "
        + " -> ".join(cycle)
        + " ("
        + "; ".join(why for edge in zip(cycle, cycle[1:]) for why in PART_IMPORTS[edge])
        + ")"
        for cycle in _cycles(graph)
    ]
    assert not cycles, "\n".join(cycles)


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


# Sides that read the algorithm's config through typed settings of their own (as verl hands each worker its
# config object): a DAPO setting renamed or moved in `DAPOConfig` then breaks the one function that maps it.
# The algorithm's modules are a side too, all but the config's own (dapo.py). The command line (dapo_rllib.cli)
# is not a side: it writes the config from what the user typed (and `rllib evaluate` reads a checkpoint's back),
# as the config's own module does.
TYPED_SETTINGS_SIDES = (
    "dapo_rllib.rollout",
    "dapo_rllib.algorithm",
    "dapo_rllib.tasks",
    "dapo_rllib.models",
    "dapo_rllib.reporting",
    "dapo_rllib.doctor",
)
CONFIG_MODULE = "dapo_rllib.algorithm.dapo"
# The functions that map `DAPOConfig` to a side's settings, by module: the only ones that may read its shape.
SETTINGS_BUILDERS = {
    "dapo_rllib.rollout.vllm_engine": {"EngineSettings.from_config"},
    "dapo_rllib.rollout.env_runner": {"RunnerSettings.from_config"},
    "dapo_rllib.algorithm.dynamic_sampling": {"CollectSettings.from_config"},
    "dapo_rllib.algorithm.learner": {"UpdateSettings.from_config"},
    "dapo_rllib.algorithm.deepspeed_learner": {"DeepSpeedSettings.from_config"},
    "dapo_rllib.doctor.run": {"CheckedRun.from_config"},
    "dapo_rllib.doctor.data_checks": {"RunSampling.from_config"},
}
# Names the algorithm's config goes by: a variable or parameter, or an attribute (`self.config`).
CONFIG_NAMES = {"config", "cfg", "algo_config", "eval_config", "eval_cfg"}


def _dapo_settings() -> set[str]:
    """The attributes `DAPOConfig` adds to RLlib's `AlgorithmConfig`: its settings, and the properties and
    methods it derives from them."""
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    from dapo_rllib.algorithm.dapo import DAPOConfig

    added = set(vars(DAPOConfig())) | set(vars(DAPOConfig))
    return {name for name in added - set(vars(AlgorithmConfig())) - set(dir(AlgorithmConfig)) if name[0] != "_"}


def _config_reads(path: Path, settings: set[str]) -> list[tuple[str, int, str]]:
    """(the enclosing function's qualified name, line, the expression) of every read of one of `settings` off
    the config in `path`."""
    found = []

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, f"{scope}.{child.name}".lstrip("."))
                continue
            holder = getattr(child, "value", None)
            if (
                isinstance(child, ast.Attribute)
                and isinstance(child.ctx, ast.Load)
                and child.attr in settings
                and getattr(holder, "id", getattr(holder, "attr", None)) in CONFIG_NAMES
            ):
                found.append((scope, child.lineno, ast.unparse(child)))
            visit(child, scope)

    visit(ast.parse(path.read_text()), "")
    return found


def test_typed_settings_sides_read_no_dapo_setting_off_the_config():
    settings = _dapo_settings()
    assert {"max_response_length", "lora_sync_path", "sampler_settings"} <= settings  # what the check looks for
    reads = {name: _config_reads(path, settings) for name, path in MODULES.items()}
    for module, builders in SETTINGS_BUILDERS.items():  # an allowance must still be needed
        assert builders <= {scope for scope, _, _ in reads[module]}, f"{module}: {builders} read no setting"
    direct = [
        f"{MODULES[name].relative_to(PACKAGE.parent)}:{line} ({scope or 'module'}) reads {expression}"
        for name, found in reads.items()
        if name != CONFIG_MODULE and any(name == side or name.startswith(side + ".") for side in TYPED_SETTINGS_SIDES)
        for scope, line, expression in found
        if scope not in SETTINGS_BUILDERS.get(name, set())
    ]
    assert not direct, (
        "read the side's typed settings (built once by its `from_config`), not DAPOConfig's attributes:\n"
        + "\n".join(direct)
    )


# --- the suite's layout: the tests of a module are found by its path ------------------------------------------

TESTS = Path(__file__).resolve().parent
SUPPORT = TESTS / "support"
TEST_FILES = sorted(TESTS.rglob("test_*.py"))
# The names a file of the suite is imported by when it is not imported as `tests.support.<module>`: pytest puts
# each test folder on sys.path (no __init__.py in them), so `import test_learner` or `from rllib_command import`
# finds another file of the suite.
SUITE_MODULES = {path.stem for path in TESTS.rglob("*.py")} - {"__init__"}


def _mirrors_a_package(folder: Path) -> bool:
    """Whether `folder` (under tests/) is the suite's own (tests/ itself) or that of a real package folder:
    dapo_rllib/<folder>/ or envs/."""
    if folder == Path("."):
        return True
    base = PACKAGE.parent if folder.parts[0] == "envs" else PACKAGE
    return (base / folder / "__init__.py").is_file()


def test_each_test_file_is_in_the_folder_of_the_subpackage_it_tests():
    assert len(TEST_FILES) > 50 and (TESTS / "algorithm" / "test_learner.py") in TEST_FILES  # the walk sees them
    folders = {
        path.relative_to(TESTS)
        for path in TESTS.rglob("*")
        if path.is_dir() and path != SUPPORT and SUPPORT not in path.parents and "__pycache__" not in path.parts
    }
    stray = sorted(str(folder) for folder in folders if not _mirrors_a_package(folder))
    assert not stray, f"test folders that mirror no dapo_rllib/<subpackage>/ or envs/: {stray}"
    assert not [path for path in TEST_FILES if SUPPORT in path.parents], "tests/support/ holds helpers, not tests"
    # pytest imports a test file by its basename: two of one name in different folders would collide.
    names = [path.name for path in TEST_FILES]
    assert len(names) == len(set(names)), sorted(name for name in names if names.count(name) > 1)


def _suite_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import in `path` of another file of the suite but through tests.support."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from tests import support` imports tests.support; `from tests.support import runs`, tests.support.runs.
            names = [f"{node.module}.{alias.name}" for alias in node.names] if node.module == "tests" else [node.module]
        else:
            continue
        for name in names:
            top = name.partition(".")[0]
            through_support = name == "tests.support" or name.startswith("tests.support.")
            if (top == "tests" and not through_support) or top in SUITE_MODULES:
                found.append((node.lineno, name))
    return found


def test_the_import_check_finds_a_test_file_imported_by_another(tmp_path):
    source = tmp_path / "test_example.py"
    source.write_text(
        "import numpy\nimport naive_scorers\nfrom test_learner import update\nfrom tests.test_config import ROOT\n"
        "from tests import support\nfrom tests.support.runs import tiny_config\n"
        "from dapo_rllib.columns import Columns\n"
    )
    assert _suite_imports(source) == [(2, "naive_scorers"), (3, "test_learner"), (4, "tests.test_config")]


def test_test_files_import_helpers_from_tests_support_only():
    files = sorted(TESTS.rglob("*.py"))
    found = [
        f"{path.relative_to(TESTS)}:{line} imports {name}" for path in files for line, name in _suite_imports(path)
    ]
    assert not found, "import the helpers from tests.support (move a shared one there):\n" + "\n".join(found)
