"""`rllib doctor MODEL --data FILE`: whether a run of the model on FILE has anything to learn from, measured on a
few of its problems before any training.

Dynamic sampling trains on the groups whose reward varies. A scorer that cannot read the model's answers, or
problems the model always gets wrong (or always right), leave no such group, and the run stops at its round cap.
The doctor samples the first problems as a run would (`group_size` samples of each, at the run's temperature,
top_p and response length), scores them with the run's scorer, and reports three rows:

    answers parsed          share of samples the scorer read an answer from
    reward mean             the scorer's mean reward, and the accuracy
    groups with variation   share of problems whose samples' `filter_metric` differs (what dynamic sampling keeps)

A low share names the fix: another scorer or a prompt template that asks for the format the scorer reads; easier
problems (or harder ones, when every answer is right).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from dapo_rllib.doctor.report import FAIL, NOTE, PASS, Check
from dapo_rllib.rollout.vllm_engine import SamplerSettings
from dapo_rllib.tasks.data import load_math_dataset
from dapo_rllib.tasks.data.prompts import render_prompt_ids
from dapo_rllib.tasks.rewards import load_scorer, scorer_for
from dapo_rllib.tasks.rewards.math_dapo import INVALID_PRED

#: Below this share of parsed answers the scorer and the model do not speak the same format.
MIN_PARSED = 0.5
#: Below this share of groups with variation most generation rounds are thrown away.
MIN_VARYING = 0.25


@dataclasses.dataclass(frozen=True)
class RunSampling:
    """What the data check reads of a run: how its engines sample (`sampler`), how many samples make a group, the
    metric dynamic sampling keeps groups by, and the scorer the run chose (`env_config["scorer"]`; None: each data
    source's own)."""

    sampler: SamplerSettings
    group_size: int
    filter_metric: str
    scorer: str | None = None

    @classmethod
    def from_config(cls, config) -> RunSampling:
        """The run `config`'s (a `DAPOConfig`): the one place the data check reads the algorithm's settings."""
        return cls(config.sampler_settings, config.group_size, config.filter_metric, config.env_config.get("scorer"))


@dataclasses.dataclass(frozen=True)
class DataProbe:
    """The data check's sample: the first `problems` problems of the DAPO-format file `path`, seeded."""

    path: str
    problems: int = 8
    seed: int = 0


def data_checks(llm, tokenizer, run: RunSampling, probe: DataProbe) -> list[Check]:
    """The three rows of the module doc, for `run` on `probe`'s problems, sampled with `llm`."""
    problems = load_math_dataset(probe.path)[: probe.problems]
    groups = _scored_groups(llm, tokenizer, run, problems, probe.seed)
    results = [result for group in groups for result in group]
    parsed = np.mean([result["pred"] not in (None, INVALID_PRED) for result in results])
    reward = float(np.mean([result["score"] for result in results]))
    accuracy = float(np.mean([result["acc"] for result in results]))
    metric = run.filter_metric
    varying = float(np.mean([len({float(result[metric]) for result in group}) > 1 for group in groups]))
    where = f"{len(results)} samples of {len(groups)} problems"
    return [
        Check(
            "answers parsed",
            PASS if parsed >= MIN_PARSED else FAIL,
            f"{parsed:.0%} of {where}" + ("" if parsed >= MIN_PARSED else f"; {_scorer_fix(run, problems)}"),
            {"share": float(parsed), "samples": len(results)},
        ),
        Check("reward mean", NOTE, f"{reward:.3f}, accuracy {accuracy:.0%}", {"mean": reward, "accuracy": accuracy}),
        Check(
            "groups with variation",
            PASS if varying >= MIN_VARYING else FAIL,
            f"{varying:.0%} of {len(groups)} groups of {run.group_size} vary in {metric!r}"
            + ("" if varying >= MIN_VARYING else f"; {_difficulty_fix(accuracy, parsed)}"),
            {"share": varying, "groups": len(groups), "group_size": run.group_size},
        ),
    ]


def _scored_groups(llm, tokenizer, run: RunSampling, problems, seed: int) -> list[list[dict[str, Any]]]:
    """`run.group_size` completions of each problem, each scored by its data source's scorer under the run's
    choice."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    # DAPO keeps a long prompt's end, as the environment does.
    sampler = run.sampler
    prompts = [render_prompt_ids(tokenizer, list(p.messages))[-sampler.max_prompt_length :] for p in problems]
    params = SamplingParams(
        n=run.group_size,
        temperature=sampler.temperature,
        top_p=sampler.top_p,
        max_tokens=sampler.max_response_length,
        seed=seed,
    )
    outputs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompts], params, use_tqdm=False)
    return [
        [
            load_scorer(scorer_for(problem.data_source, run.scorer))(completion.text, problem.ground_truth)
            for completion in output.outputs
        ]
        for problem, output in zip(problems, outputs)
    ]


def _scorer_fix(run: RunSampling, problems) -> str:
    sources = sorted({problem.data_source for problem in problems})
    scorers = sorted({scorer_for(source, run.scorer) for source in sources})
    return (
        f"the scorer {', '.join(scorers)} cannot read most answers: try another scorer (--scorer math_verify, or "
        "your own module:function), or a prompt template that asks for the format it reads (rllib data convert "
        "--template; math_dapo reads an 'Answer:' line)"
    )


def _difficulty_fix(accuracy: float, parsed: float) -> str:
    if parsed < MIN_PARSED:
        return "most answers are not read: fix the scorer or the template first"
    if accuracy >= 0.5:
        return "the model gets almost every answer right: harder problems, or a larger group_size"
    return "the model gets almost every answer wrong: easier problems (or a stronger model), or a larger group_size"
