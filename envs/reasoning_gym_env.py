"""reasoning-gym's procedurally generated tasks as a single-step language environment (`dapo_reasoning_gym`).

reasoning-gym (https://github.com/open-thought/reasoning-gym) has about a hundred task families, each a generator
with difficulty settings and its own verifier. This environment asks one family, or a weighted mix of several,
for problems; the model answers in the format `answer_format` names; the family's verifier scores the extracted
answer (`dataset.score_answer`), a score s in [0, 1] that becomes the reward 2s - 1 (+1 right, -1 wrong, as the
math scorers give; partial credit in between), right when s = 1.

Train and held-out problems are disjoint: reasoning-gym draws problem i of a dataset seeded s from
`Random(s + i)`, so the test split is generated from seeds `TEST_SEED_OFFSET` higher, and any test problem whose
question a training set of `train_problems` problems also asks (small problem spaces repeat) is dropped, with a
count in the log. Each family reports under its own data source, `reasoning_gym/<family>`.

With a `curriculum`, each family's difficulty is reasoning-gym's own curriculum for it at a level (0 at the
start): the curriculum's settings (terms, digits, ...) over `task_config`'s. DAPO raises a family's level
after a validation in which the family's held-out accuracy reached the threshold (`dapo_rllib.tasks.curriculum`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from dapo_rllib.contracts import ScoreResult
from dapo_rllib.tasks.curriculum import next_levels
from dapo_rllib.tasks.data.datasets import read_rows
from dapo_rllib.tasks.problem_env import PROBLEM_CONFIG, ProblemEnv

logger = logging.getLogger(__name__)

#: Value of the "dataset" config key: the problems are generated (the only source).
GENERATED = "generated"
#: The test split's generator seeds start this far above the training split's (far above any split's size).
TEST_SEED_OFFSET = 2**31
#: The `extra_info` key of a written row that holds what scoring it needs (`problem_row`).
ROW_KEY = "reasoning_gym"
#: Problems in a split when `num_problems` is None.
DEFAULT_SPLIT_SIZES = {"train": 1000, "test": 200}

#: How the model is asked to give its answer, and how the answer is read back: (instruction, pattern whose last
#: match's first group is the answer).
ANSWER_FORMATS: dict[str, tuple[str, re.Pattern]] = {
    # reasoning-gym's own convention (reasoning_gym.utils.extract_answer).
    "answer_tag": (
        "Give your final answer between <answer> and </answer>, e.g. <answer>42</answer>.",
        re.compile(r"<answer>\s?(.*?)\s?</answer>", re.DOTALL),
    ),
    # The answer alone: what small instruct models do best when asked (the whole response, stripped).
    "bare": ("Answer with just the answer, nothing else.", re.compile(r"\A\s*(.*?)\s*\Z", re.DOTALL)),
    # The last number in the response, however much text surrounds it (lm-evaluation-harness's "flexible
    # extract"): a small instruct model asked for just the number often writes "3 + 4 = 7." instead.
    "last_number": ("Answer with just the number.", re.compile(r"(-?\d+(?:\.\d+)?)(?!.*\d)", re.DOTALL)),
    # The DAPO math prompt's convention: the answer on the last line, after "Answer:".
    "answer_line": (
        'The last line of your response should be of the form "Answer: $Answer" where $Answer is the answer.',
        re.compile(r"Answer:\s*(.+?)\s*$", re.MULTILINE),
    ),
}

#: Config keys and their defaults.
DEFAULT_CONFIG: dict[str, Any] = {
    "dataset": GENERATED,
    **PROBLEM_CONFIG,
    "task": "basic_arithmetic",
    "task_config": {},
    "data_seed": 0,
    "train_problems": DEFAULT_SPLIT_SIZES["train"],
    "answer_format": "answer_tag",
    "curriculum": None,
}


@dataclasses.dataclass(frozen=True)
class ReasoningGymProblem:
    """A reasoning-gym entry (question, answer, metadata) of task family `family`, as a prompt."""

    messages: tuple[dict, ...]
    ground_truth: str
    data_source: str
    family: str
    answer_format: str
    entry: dict = dataclasses.field(compare=False, repr=False)
    config: dict = dataclasses.field(compare=False, repr=False)  # the family's settings it was generated with


def task_weights(task: str | Mapping[str, float]) -> dict[str, float]:
    """{family: weight} of a `task` setting: one family's name, or a mix {name: weight}.

    Raises:
        ValueError: An unknown family (the message lists the known ones), or a weight that is not positive.
    """
    from reasoning_gym.factory import DATASETS

    weights = {task: 1.0} if isinstance(task, str) else dict(task)
    if not weights:
        raise ValueError("ReasoningGymEnv 'task' is an empty mix; expected a family's name or {name: weight}")
    unknown = sorted(name for name in weights if name not in DATASETS)
    if unknown:
        raise ValueError(f"ReasoningGymEnv 'task': unknown reasoning-gym task(s) {unknown}; known: {sorted(DATASETS)}")
    bad = {name: w for name, w in weights.items() if not isinstance(w, (int, float)) or w <= 0}
    if bad:
        raise ValueError(f"ReasoningGymEnv 'task' weights must be positive numbers, got {bad}")
    return {name: float(w) for name, w in weights.items()}


def data_source(family: str) -> str:
    """The data source a family's problems report under."""
    return f"reasoning_gym/{family}"


def family_curricula(curriculum: Mapping[str, Any] | None, weights: Mapping[str, float]) -> dict[str, tuple[Any, int]]:
    """{family: (its reasoning-gym curriculum, its last level)} for a `curriculum` setting; {} for None.

    Raises:
        ValueError: A setting other than ``{"threshold": t}`` with t in [0, 1], or a family reasoning-gym has no
            curriculum for (the message lists those it has).
    """
    if curriculum is None:
        return {}
    threshold = curriculum.get("threshold") if isinstance(curriculum, Mapping) else None
    if set(curriculum if isinstance(curriculum, Mapping) else ()) != {"threshold"} or not (
        isinstance(threshold, (int, float)) and 0 <= threshold <= 1
    ):
        raise ValueError(
            f"ReasoningGymEnv 'curriculum'={curriculum!r}; expected None or {{'threshold': t}} with t in [0, 1], "
            "the held-out accuracy at which a family's level rises (0: after every validation)"
        )
    from reasoning_gym.factory import CURRICULA, create_curriculum

    missing = sorted(family for family in weights if family not in CURRICULA)
    if missing:
        raise ValueError(
            f"ReasoningGymEnv 'curriculum': reasoning-gym has no curriculum for {missing}; it has {sorted(CURRICULA)}"
        )
    out = {}
    for family in weights:
        curriculum_of = create_curriculum(family)
        out[family] = (curriculum_of, max(len(a.levels) for a in curriculum_of.attributes.values()) - 1)
    return out


def family_sizes(weights: Mapping[str, float], size: int) -> dict[str, int]:
    """How many of `size` problems each family gives: proportional to its weight (largest remainders)."""
    total = sum(weights.values())
    exact = {name: size * w / total for name, w in weights.items()}
    sizes = {name: int(x) for name, x in exact.items()}
    for name in sorted(exact, key=lambda n: sizes[n] - exact[n])[: size - sum(sizes.values())]:
        sizes[name] += 1
    return sizes


class ReasoningGymEnv(ProblemEnv[ReasoningGymProblem]):
    """Single-step environment over reasoning-gym tasks.

    Config keys (all optional; see ``DEFAULT_CONFIG``):
        task: A reasoning-gym task family (``reasoning_gym.factory.DATASETS``), or a mix ``{name: weight}``.
        task_config: The families' settings, difficulty included (their config dataclass's fields, e.g.
            ``{"min_terms": 2, "max_terms": 2}``): for one family, a dict of them; for a mix, ``{name: dict}``.
        split: ``"train"`` or ``"test"`` (held out: other seeds, and no question of the training set).
        num_problems: Problems in the split (None: 1,000 for train, 200 for test), shared by the mix's
            families in proportion to their weights.
        data_seed: Seed of the problems (the same problems in every env runner).
        train_problems: Size of the training set a test split must not overlap.
        answer_format: ``"answer_tag"`` (``<answer>...</answer>``, reasoning-gym's), ``"answer_line"`` (a last
            line ``Answer: ...``, DAPO's math prompt's), ``"bare"`` (the whole response is the answer) or
            ``"last_number"`` (the response's last number: for numeric families); the prompt asks for it, the
            scorer reads it.
        curriculum: None, or ``{"threshold": t}``: each family at a level of its reasoning-gym curriculum
            (`reasoning_gym.factory.create_curriculum`), raised by one after a validation in which its held-out
            avg@n reached t (`curriculum_levels`, `next_curriculum_levels`, `set_curriculum_levels`).
        shuffle, seed: The draw order (:class:`ProblemEnv`).
    """

    DEFAULT_CONFIG = DEFAULT_CONFIG
    BUILTIN_DATASET = GENERATED

    def __init__(self, config: Mapping[str, Any] | None = None):
        settings = self.settings(config)
        if settings["answer_format"] not in ANSWER_FORMATS:
            raise ValueError(
                f"ReasoningGymEnv 'answer_format'={settings['answer_format']!r}; expected one of {sorted(ANSWER_FORMATS)}"
            )
        self._weights = task_weights(settings["task"])
        self._instruction, self._answer_pattern = ANSWER_FORMATS[settings["answer_format"]]
        self._datasets: dict[str, Any] = {}  # family -> its dataset of the split (scores that family's answers)
        self._curriculum = family_curricula(settings["curriculum"], self._weights)
        self._levels = {family: 0 for family in self._curriculum}
        self._settings = settings
        super().__init__(settings)

    # ----- the curriculum (dapo_rllib.tasks.curriculum) -------------------------------------------
    def curriculum_levels(self) -> dict[str, int] | None:
        """{data source: level} of each family, or None without a curriculum."""
        return {data_source(f): level for f, level in self._levels.items()} if self._curriculum else None

    def next_curriculum_levels(self, levels: Mapping[str, int], accuracy: Mapping[str, float]) -> dict[str, int]:
        """`levels` after a validation of held-out `accuracy` {data source: avg@n}: a family's raised by one
        where its accuracy reached the threshold, up to its curriculum's last level."""
        top = {data_source(f): max_level for f, (_, max_level) in self._curriculum.items()}
        return next_levels(levels, accuracy, self._settings["curriculum"]["threshold"], top)

    def set_curriculum_levels(self, levels: Mapping[str, int]) -> None:
        """Put each family at its level in `levels` and draw the split's problems anew at those levels."""
        by_family = {family: int(levels[data_source(family)]) for family in self._curriculum}
        if by_family != self._levels:
            self._levels = by_family
            self._problems = self._load_problems(self._settings)

    def _load_problems(self, settings: Mapping[str, Any]) -> list[ReasoningGymProblem]:
        if settings["dataset"] != GENERATED:
            return self._load_file(settings)
        split = settings["split"]
        if split not in DEFAULT_SPLIT_SIZES:
            raise ValueError(f"ReasoningGymEnv 'split'={split!r}; expected 'train' or 'test'")
        size = settings["num_problems"] or DEFAULT_SPLIT_SIZES[split]
        configs = self._leveled(self._family_configs(settings["task_config"]))
        seed = settings["data_seed"] + (TEST_SEED_OFFSET if split == "test" else 0)
        problems = []
        for family, n in family_sizes(self._weights, size).items():
            if n == 0:
                continue
            dataset = _create(family, configs[family], n, seed)
            self._datasets[family] = dataset
            entries = list(dataset)
            if split == "test":
                entries = self._held_out(family, configs[family], entries, settings)
            problems += [self._problem(family, entry, configs[family]) for entry in entries]
        # The families interleaved in a fixed order (a mix's first problems are not all one family's).
        order = np.random.default_rng(settings["data_seed"]).permutation(len(problems))
        return [problems[i] for i in order]

    def _family_configs(self, task_config: Mapping[str, Any]) -> dict[str, dict]:
        if not isinstance(task_config, Mapping):
            raise TypeError(f"ReasoningGymEnv 'task_config' must be a dict, got {type(task_config).__name__}")
        if len(self._weights) == 1 and not set(task_config) & set(self._weights):
            return {next(iter(self._weights)): dict(task_config)}
        unknown = sorted(set(task_config) - set(self._weights))
        if unknown:
            raise ValueError(
                f"ReasoningGymEnv 'task_config' names {unknown}, not in the mix {sorted(self._weights)}; "
                "for a mix, expected {name: settings}"
            )
        return {family: dict(task_config.get(family, {})) for family in self._weights}

    def _leveled(self, configs: dict[str, dict]) -> dict[str, dict]:
        """`configs` with each curriculum family's settings at its level laid over them."""
        out = dict(configs)
        for family, (curriculum, _) in self._curriculum.items():
            curriculum.set_global_level(self._levels[family])
            generated = dataclasses.asdict(curriculum.generate_configuration(configs[family]))
            out[family] = {k: v for k, v in generated.items() if k not in ("seed", "size")}
        return out

    def _held_out(self, family: str, config: dict, entries: list[dict], settings: Mapping[str, Any]) -> list[dict]:
        """`entries` less those whose question the training split (of `train_problems`) also asks."""
        train_size = family_sizes(self._weights, settings["train_problems"])[family]
        train = (
            {entry["question"] for entry in _create(family, config, train_size, settings["data_seed"])}
            if train_size
            else set()
        )
        kept = [entry for entry in entries if entry["question"] not in train]
        if len(kept) < len(entries):
            logger.info(
                "reasoning-gym %s: %d of %d held-out problems dropped, their questions are in the training set",
                family,
                len(entries) - len(kept),
                len(entries),
            )
        return kept

    def _problem(self, family: str, entry: dict, config: dict) -> ReasoningGymProblem:
        prompt = f"{entry['question']}\n\n{self._instruction}"
        return ReasoningGymProblem(
            messages=({"role": "user", "content": prompt},),
            ground_truth=str(entry["answer"]),
            data_source=data_source(family),
            family=family,
            answer_format=self._settings["answer_format"],
            entry=entry,
            config=config,
        )

    # ----- a fixed set as rows (`rllib data convert env:dapo_reasoning_gym`) ------------------------
    def problem_row(self, index: int) -> dict[str, Any]:
        """Problem `index` as a DAPO-format row; `extra_info["reasoning_gym"]` holds what scoring it needs
        (family, settings, entry, answer format) as JSON, so the row reads back (`dataset`) as the same problem."""
        problem = self.problem(index)
        record = {
            "family": problem.family,
            "config": problem.config,
            "answer_format": problem.answer_format,
            "entry": problem.entry,
        }
        try:
            saved = json.dumps(record, sort_keys=True)
        except TypeError as error:
            raise ValueError(
                f"reasoning-gym {problem.family} problem {index} cannot be written as JSON: {error}"
            ) from None
        return {
            "data_source": problem.data_source,
            "prompt": [dict(message) for message in problem.messages],
            "ability": "reasoning",
            "reward_model": {"ground_truth": problem.ground_truth, "style": "rule"},
            "extra_info": {"index": index, ROW_KEY: saved},
        }

    def _load_file(self, settings: Mapping[str, Any]) -> list[ReasoningGymProblem]:
        """The problems of a file of `problem_row` rows, in its order."""
        path = settings["dataset"]
        if not isinstance(path, str):
            raise TypeError(f"ReasoningGymEnv 'dataset' must be {GENERATED!r} or a file path, got {path!r}")
        if settings["num_problems"] is not None or self._curriculum:
            raise ValueError(
                f"ReasoningGymEnv 'dataset'={path!r} is a fixed set: 'num_problems' and 'curriculum' apply to "
                f"generated problems ({GENERATED!r}) only"
            )
        problems = []
        for i, row in enumerate(read_rows(Path(path), "reasoning-gym dataset")):
            saved = (row.get("extra_info") or {}).get(ROW_KEY)
            if not isinstance(saved, str):
                raise ValueError(
                    f"row {i} of {path} has no extra_info.{ROW_KEY}; expected rows written by "
                    "`rllib data convert env:dapo_reasoning_gym`"
                )
            record = json.loads(saved)
            family = record["family"]
            task_weights(family)  # a family this reasoning-gym does not have is refused, naming it
            if family not in self._datasets:  # the family's verifier
                self._datasets[family] = _create(family, record["config"], 1, 0)
            problems.append(
                ReasoningGymProblem(
                    messages=tuple(dict(m) for m in row["prompt"]),
                    ground_truth=str(row["reward_model"]["ground_truth"]),
                    data_source=row["data_source"],
                    family=family,
                    answer_format=record["answer_format"],
                    entry=record["entry"],
                    config=record["config"],
                )
            )
        return problems

    def extract_answer(self, completion: str, answer_format: str | None = None) -> str | None:
        """The answer in `completion`, in `answer_format` (default: this env's), its last occurrence; None if none."""
        pattern = ANSWER_FORMATS[answer_format][1] if answer_format else self._answer_pattern
        matches = pattern.findall(completion)
        return matches[-1].strip() or None if matches else None

    def score(self, problem: ReasoningGymProblem, completion: str) -> ScoreResult:
        pred = self.extract_answer(completion, problem.answer_format)
        verdict = 0.0 if pred is None else float(self._datasets[problem.family].score_answer(pred, problem.entry))
        return {"score": 2.0 * verdict - 1.0, "acc": verdict == 1.0, "pred": pred}


def _create(family: str, config: dict, size: int, seed: int):
    from reasoning_gym import create_dataset

    try:
        return create_dataset(family, **config, size=size, seed=seed)
    except TypeError as error:  # a setting the family's config does not have
        raise ValueError(f"ReasoningGymEnv 'task_config' of {family!r}: {error}") from None
