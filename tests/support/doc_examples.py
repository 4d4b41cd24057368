"""The complete examples of the docs: python blocks with a title, ```python title="name.py"```.

A titled block is a whole file a reader can run; a block without a title is a fragment (a real
model's path, a cluster's resources). Other tests find an example by its title, so titles are unique.
"""

from __future__ import annotations

import ast
import re
import sys
import textwrap
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import ROOT

DOCS = ROOT / "docs"
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
TITLE = re.compile(r'^python\b.*\btitle="(?P<title>[^"]+)"')


@dataclass(frozen=True)
class DocExample:
    page: Path
    line: int  # the opening fence's line, from 1
    title: str
    code: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(DOCS.parent)}:{self.line} ({self.title})"


def page_examples(page: Path) -> list[DocExample]:
    """The titled python blocks of one page; a block inside another (a longer fence) is not one."""
    examples, opened, body = [], None, []
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        fence = FENCE.match(line)
        if opened is None:
            if fence:
                opened, body = (fence["fence"], fence["info"].strip(), number), []
        elif (
            fence
            and fence["fence"][0] == opened[0][0]
            and len(fence["fence"]) >= len(opened[0])
            and not fence["info"].strip()
        ):
            title = TITLE.match(opened[1])
            if title:
                examples.append(DocExample(page, opened[2], title["title"], textwrap.dedent("\n".join(body)) + "\n"))
            opened = None
        else:
            body.append(line)
    if opened is not None:
        raise ValueError(f"{page}:{opened[2]}: a code block that is never closed")
    return examples


def doc_examples() -> list[DocExample]:
    """Every titled python block under docs/, page by page."""
    return [example for page in sorted(DOCS.rglob("*.md")) for example in page_examples(page)]


def doc_example(title: str) -> DocExample:
    """The example with this title; an error names the titles there are."""
    examples = doc_examples()
    found = [example for example in examples if example.title == title]
    if len(found) != 1:
        raise LookupError(f"{len(found)} docs examples titled {title!r}; the titles: {[e.title for e in examples]}")
    return found[0]


@contextmanager
def example_module(example: DocExample, name: str, *, by_value: bool = False) -> Iterator[types.ModuleType]:
    """The example executed as a module of its own, in `sys.modules` while in use (dataclasses look
    their module up there). `by_value`: its classes travel to Ray workers by value, since those
    processes cannot import a module that exists only here."""
    module = types.ModuleType(name)
    sys.modules[name] = module
    if by_value:
        import ray

        # Before the example runs: registering an env pickles its class.
        ray.cloudpickle.register_pickle_by_value(module)
    try:
        exec(compile(example.code, str(example), "exec"), module.__dict__)
        yield module
    finally:
        if by_value:
            ray.cloudpickle.unregister_pickle_by_value(module)
        del sys.modules[name]


# --------------------------------------------------------------------------
# The code the docs name: module paths and dotted names, resolved in the source (nothing imported).
# --------------------------------------------------------------------------

PACKAGES = ("dapo_rllib", "envs")
# Dotted names in the docs that are not Python objects.
NOT_CODE = {"dapo_rllib.environments"}  # the entry-point group of pyproject.toml
FILE_PATH = re.compile(r"\b(?:dapo_rllib|envs|bench|tests|tuned_examples)/[\w/.-]*\w\.py\b")
FULL_NAME = re.compile(r"`((?:dapo_rllib|envs)(?:\.\w+)+)|^::: ((?:dapo_rllib|envs)(?:\.\w+)+)", re.M)
SHORT_NAME = re.compile(r"`(\w+(?:\.\w+)+)")
FILE_SUFFIXES = {"py", "md", "png", "json", "jsonl", "parquet", "csv", "gz", "txt", "toml", "yml"}
# A design page names the files it plans in a comment, `<!-- planned: a/b.py c/d.py -->`, until they are written.
PLANNED = re.compile(r"<!--\s*planned:(.*?)-->", re.S)


def modules() -> dict[str, Path]:
    """Every module of the packages by its dotted name."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _defines(body: list[ast.stmt], names: list[str]) -> bool:
    """Whether `names[0]` is defined in `body` (and, through classes, the names after it)."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == names[0]:
            return len(names) == 1 or (isinstance(node, ast.ClassDef) and _defines(node.body, names[1:]))
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        flat = [t for target in targets for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
        assigned = [t.attr if isinstance(t, ast.Attribute) else getattr(t, "id", None) for t in flat]
        imported = [a.asname or a.name for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
        if names[0] in assigned + imported:
            return len(names) == 1
        # Instance attributes a class sets in __init__ (`self.x = ...`).
        if isinstance(node, ast.FunctionDef) and node.name == "__init__" and _defines(node.body, names):
            return True
    return False


def resolves(name: str, table: dict[str, Path]) -> bool:
    """Whether a dotted name is a module of the packages, or a name defined in one (longest module first)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module = table.get(".".join(parts[:cut]))
        if module is not None:
            rest = parts[cut:]
            return not rest or _defines(ast.parse(module.read_text()).body, rest)
    return False


def stale_code_names(text: str, table: dict[str, Path]) -> list[str]:
    """The file paths and dotted names of the code in `text` that the source does not have.

    A planned file is not stale until it is written; then its entry in the plan is (drop it from the list).
    """
    planned = {path for paths in PLANNED.findall(text) for path in paths.split()}
    stale = [f"{path} (written: no longer planned)" for path in sorted(planned) if (ROOT / path).is_file()]
    stale += [path for path in FILE_PATH.findall(text) if not (ROOT / path).is_file() and path not in planned]
    full = {a or b for a, b in FULL_NAME.findall(text)} - NOT_CODE
    stale += [name for name in sorted(full) if not resolves(name, table)]
    basenames = {module.rsplit(".", 1)[-1] for module in table} - set(PACKAGES)
    for name in sorted(set(SHORT_NAME.findall(text)) - full):
        head, *rest = name.split(".")
        if head not in basenames or head in PACKAGES:
            continue
        if rest == ["py"] or rest[-1] not in FILE_SUFFIXES:
            # `module.py`, or `module.name` as short for the module wherever it lives in the packages.
            holders = [module for module in table if module.rsplit(".", 1)[-1] == head]
            tail = ".".join(rest[:-1] if rest == ["py"] else rest)
            if not any(resolves(f"{holder}.{tail}" if tail else holder, table) for holder in holders):
                stale.append(name)
    return stale
