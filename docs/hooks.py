"""MkDocs hooks: the pages generated from the code, and the measurements of bench/results in the site.

- `<!-- generated: layout -->` becomes the repository's layout, one row per module with the first
  paragraph of its docstring (read with `ast`, nothing imported).
- `<!-- generated: settings-defaults -->` becomes the table of DAPOConfig's settings and their defaults,
  read from a fresh `DAPOConfig()` (the settings' meanings come from the docstrings, by mkdocstrings).
- `<!-- generated: scale-table WORKLOAD="column label" ... -->` becomes the table of `bench/scale.py`'s
  results for those workloads, read from bench/results/scale_<WORKLOAD>.json.
- `<!-- generated: micro-batch-sweep FILE="row label" ... -->` becomes the table of the micro-batch
  sweeps in bench/results/<FILE>.json (`bench/scale.py --sweep-micro-batch-tokens`).
- The figures and JSON files of bench/results are served under results/.

The settings table and the benchmark tables (`IN_FILE`) also live in their pages, between their marker and
`<!-- end generated -->`, so that a page reads on its own as plain Markdown; `python docs/hooks.py` writes them
there again after a change, and tests/test_docs_examples.py fails while a page holds an out-of-date one. The
layout is generated when the site is built only: it changes with every module added.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import shlex
import sys
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
# Directories whose Python files the layout lists, and whether to descend into subdirectories.
LAYOUT_DIRS = (("dapo_rllib", True), ("envs", False), ("tuned_examples/dapo", False), ("bench", False))
# The settings methods of DAPOConfig; RLlib's settings of these that DAPO gives another default are listed too.
SETTINGS_METHODS = ("training", "evaluation", "reporting")
# The settings DAPOConfig holds itself (documented in its class docstring), with the method that sets each.
OWN_SETTINGS = (("async_rollout", "training"), ("tensorboard_dir", "reporting"))


def on_files(files, config):
    """Serve bench/results' figures and JSON files as results/<name> (its tables are read by snippets)."""
    for path in sorted(RESULTS.iterdir()):
        if path.suffix != ".md":
            files.append(File.generated(config, f"results/{path.name}", abs_src_path=str(path)))
    return files


def on_page_markdown(markdown, page, config, files):
    return GENERATED.sub(lambda m: generate(m), markdown)


def generate(match: re.Match) -> str:
    return GENERATORS[match["kind"]](*shlex.split(match["args"]))


def regenerated(markdown: str) -> str:
    """`markdown` with the content of each `IN_FILE` region generated anew, between its markers."""

    def region(match: re.Match) -> str:
        if match["kind"] not in IN_FILE:
            return match[0]
        return f"{match['marker']}\n{generate(match)}\n{END_GENERATED}"

    return GENERATED.sub(region, markdown)


def summary(path: Path) -> str:
    """The first paragraph of a module's docstring, on one line, fit for a table cell."""
    docstring = ast.get_docstring(ast.parse(path.read_text(), filename=str(path)))
    if not docstring:
        raise ValueError(f"{path.relative_to(ROOT)} has no module docstring; the layout page lists each module's")
    first = docstring.split("\n\n", 1)[0]
    for role in (":mod:", ":class:", ":func:", ":meth:"):
        first = first.replace(role, "")
    return " ".join(first.split()).replace("``", "`").replace("|", "\\|")


def layout_markdown() -> str:
    sections = []
    for directory, recursive in LAYOUT_DIRS:
        base = ROOT / directory
        paths = sorted(base.rglob("*.py") if recursive else base.glob("*.py"))
        rows = [f"| `{p.relative_to(ROOT).as_posix()}` | {summary(p)} |" for p in paths if "__pycache__" not in p.parts]
        sections.append(f"### `{directory}/`\n\n| module | what it is |\n|---|---|\n" + "\n".join(rows))
    return "\n\n".join(sections)


def shown(value) -> str:
    """A default as a reader writes it: a function by its import path, anything else by its repr."""
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{value.__module__}.{value.__qualname__}"
    return repr(value)


def settings_defaults_markdown() -> str:
    # The docs describe this tree, as mkdocstrings does (`paths: [.]`).
    sys.path.insert(0, str(ROOT))
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    from dapo_rllib.algorithm.dapo import TRAINING_SETTINGS, DAPOConfig, EvaluationSettings

    dapo, rllib = DAPOConfig(), AlgorithmConfig()
    rows = []
    for settings, method in [(s, "training") for s in TRAINING_SETTINGS] + [(EvaluationSettings, "evaluation")]:
        rows += [
            f"| `{name}` | `{shown(getattr(dapo, name))}` | `.{method}()` | [`{settings.__name__}`](#{settings.__module__}.{settings.__qualname__}) |"
            for name in settings.defaults()
        ]
    rows += [
        f"| `{name}` | `{shown(getattr(dapo, name))}` | `.{method}()` | `DAPOConfig` |" for name, method in OWN_SETTINGS
    ]
    for method in SETTINGS_METHODS:
        # RLlib's own settings of the method, where DAPO sets another value.
        rows += [
            f"| `{n}` | `{shown(vars(dapo)[n])}` (RLlib's: `{shown(vars(rllib)[n])}`) | `.{method}()` | RLlib |"
            for n in inspect.signature(getattr(AlgorithmConfig, method)).parameters
            if n in vars(rllib) and vars(dapo)[n] != vars(rllib)[n]
        ]
    return "| setting | default | set with | documented by |\n|---|---|---|---|\n" + "\n".join(rows)


# A row of the scale table: its label and its value from one workload's results.
SCALE_ROWS = (
    ("`step_s`", lambda r: f"{r['step_s']:.1f}"),
    ("`generation_s`", lambda r: f"{r['generation_s']:.1f}"),
    ("`update_s`", lambda r: f"{r['update_s']:.1f}"),
    ("`weight_sync_s`", lambda r: f"{r['weight_sync_s']:.2f}"),
    ("sync share of the step", lambda r: f"{r['weight_sync_s'] / r['step_s']:.1%}"),
    ("generated tokens/s", lambda r: f"{r['response_tokens'] / r['generation_s']:.0f}"),
    ("`rollout_logp_abs_diff`", lambda r: f"{r['rollout_logp_abs_diff']:.4f}"),
    ("`peak_rss_learner_gb`", lambda r: f"{r['peak_rss_learner_gb']:.1f}"),
    ("`peak_rss_env_runner_gb`", lambda r: f"{r['peak_rss_env_runner_gb']:.1f}"),
    ("`framework_overhead`", lambda r: f"{r['framework_overhead']:.2f}"),
    ("`async_step_s`", lambda r: "" if r["async_step_s"] is None else f"{r['async_step_s']:.1f}"),
)


def labelled(args: tuple[str, ...]) -> list[tuple[str, str]]:
    """`NAME=label` arguments as (name, label) pairs."""
    pairs = [arg.split("=", 1) for arg in args]
    if not pairs or any(len(pair) != 2 for pair in pairs):
        raise ValueError(f'expected NAME="label" arguments, got {args}')
    return [(name, label) for name, label in pairs]


def result(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)


def scale_table(corner: str, *columns: str) -> str:
    workloads = labelled(columns)
    results = [result(f"scale_{name}") for name, _ in workloads]
    rows = [[label] + [value(r) for r in results] for label, value in SCALE_ROWS]
    return table([corner] + [label for _, label in workloads], rows)


def micro_batch_sweep(*files: str) -> str:
    sweeps = [(label, result(name)["micro_batch_sweep"]) for name, label in labelled(files)]
    budgets = [point["max_tokens_per_micro_batch"] for point in sweeps[0][1]]
    rows = []
    for label, sweep in sweeps:
        if [point["max_tokens_per_micro_batch"] for point in sweep] != budgets:
            raise ValueError(f"the sweeps {files} measured different budgets")
        fastest = min(point["bare_step_s"] for point in sweep)
        rows.append(
            [f"{label}, s"]
            + [
                f"**{p['bare_step_s']:.1f}**" if p["bare_step_s"] == fastest else f"{p['bare_step_s']:.1f}"
                for p in sweep
            ]
        )
        rows.append([f"{label}, peak above resident, GB"] + [f"{p['peak_extra_gb']:.2f}" for p in sweep])
    return table(["tokens per micro-batch"] + [f"{b:,}" for b in budgets], rows)


GENERATORS = {
    "layout": layout_markdown,
    "settings-defaults": settings_defaults_markdown,
    "scale-table": scale_table,
    "micro-batch-sweep": micro_batch_sweep,
}
#: The kinds whose content is kept in the page too, between the marker and `END_GENERATED`.
IN_FILE = ("settings-defaults", "scale-table", "micro-batch-sweep")
END_GENERATED = "<!-- end generated -->"
# A marker, and the content kept after it up to END_GENERATED, if any.
GENERATED = re.compile(
    r"(?P<marker><!-- generated: (?P<kind>[a-z-]+)(?P<args>[^>]*?)\s*-->)"
    rf"(?:\n(?:(?!<!-- generated: ).)*?{re.escape(END_GENERATED)})?",
    re.DOTALL,
)
DOCS = Path(__file__).resolve().parent


if __name__ == "__main__":
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text()
        if regenerated(text) != text:
            page.write_text(regenerated(text))
            print(f"regenerated {page.relative_to(ROOT)}")
