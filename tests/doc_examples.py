"""The complete examples of the docs: python blocks with a title, ```python title="name.py"```.

A titled block is a whole file a reader can run; a block without a title is a fragment (a real
model's path, a cluster's resources). Other tests find an example by its title, so titles are unique.
"""

from __future__ import annotations

import re
import sys
import textwrap
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).parents[1] / "docs"
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
