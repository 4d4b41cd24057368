"""The ablation's stages, its Tune grid, its report, and the scratchpad-sums task it runs on."""

import json

import pytest
from ray.tune.search.variant_generator import generate_variants

from dapo_rllib.algorithm.dapo import DAPOConfig
from dapo_rllib.experiments.ablation import (
    NAIVE_GRPO,
    STAGE_CHANGES,
    STAGE_KEY,
    ablation_search_space,
    stages,
    write_report,
)
from dapo_rllib.models.tiny import SUMS_ANSWER_STYLES, sums_answer
from dapo_rllib.tasks.data.scratchpad_sums import (
    MAX_ADDENDS,
    generate_sum_problems,
    parse_sum_question,
    scratchpad_lines,
)
from dapo_rllib.tasks.rewards.math_dapo import compute_score

STAGE_NAMES = [name for name, _ in STAGE_CHANGES]


def test_each_stage_adds_exactly_its_technique_to_the_one_before():
    table = stages(soft_overlong_buffer=16)
    assert list(table) == STAGE_NAMES
    assert table["naive GRPO"] == NAIVE_GRPO
    added = []
    for before, after in zip(STAGE_NAMES, STAGE_NAMES[1:]):
        changed = {k: table[after][k] for k in table[after] if table[after][k] != table[before][k]}
        added.append(changed)
    assert added == [
        {"overlong_filtering": True},
        {"clip_eps_high": 0.28},
        {"overlong_buffer_len": 16},
        {"loss_agg_mode": "token-mean"},
        {"dynamic_sampling": True},
    ]


def test_naive_grpo_is_faithful_grpo():
    grpo = stages(soft_overlong_buffer=16)["naive GRPO"]
    assert grpo["loss_agg_mode"] == "seq-mean-token-mean"  # 1/G sum_i 1/|o_i| sum_t
    assert grpo["clip_eps_low"] == grpo["clip_eps_high"]
    assert (grpo["overlong_filtering"], grpo["overlong_buffer_len"], grpo["dynamic_sampling"]) == (False, 0, False)


def test_the_last_stage_is_dapo():
    dapo = stages(soft_overlong_buffer=16)["+ dynamic sampling"]
    reference = DAPOConfig()
    for key in ("loss_agg_mode", "clip_eps_low", "clip_eps_high", "dynamic_sampling"):
        assert dapo[key] == getattr(reference, key)
    assert dapo["overlong_filtering"] and dapo["overlong_buffer_len"] == 16


def _resolved(config):
    """The trial configs Tune makes of `config`'s search space."""
    return [resolved for _, resolved in generate_variants(config.to_dict())]


def test_search_space_is_one_trial_per_stage_and_seed_with_the_stage_settings(tiny_model_path):
    base = (
        DAPOConfig()
        .environment("dapo_math", env_config={"dataset": "arithmetic"})
        .training(model_path=tiny_model_path, max_response_length=32)
    )
    trials = _resolved(ablation_search_space(base, seeds=2, soft_overlong_buffer=8))
    assert sorted((t[STAGE_KEY], t["seed"]) for t in trials) == sorted(
        (s, seed) for s in STAGE_NAMES for seed in (0, 1)
    )
    table = stages(soft_overlong_buffer=8)
    for trial in trials:
        assert {k: trial[k] for k in NAIVE_GRPO} == table[trial[STAGE_KEY]]
        assert trial["env_config"] == {"dataset": "arithmetic", "seed": trial["seed"]}
        config = DAPOConfig().update_from_dict(trial)
        config.validate()  # every stage is a valid DAPO config
        assert config.dynamic_sampling == table[trial[STAGE_KEY]]["dynamic_sampling"]


def test_seeds_must_be_positive():
    with pytest.raises(ValueError, match="seeds=0 must be a positive integer"):
        ablation_search_space(DAPOConfig(), seeds=0, soft_overlong_buffer=8)


METRIC = "evaluation/sums/avg@4"


def _write_trial(path, stage, seed, accuracy_by_iteration, *, samples_per_iteration=128, entropy=0.5):
    """A trial directory as Tune leaves it: params.json and one result.json line per iteration."""
    path.mkdir()
    (path / "params.json").write_text(json.dumps({STAGE_KEY: stage, "seed": seed}))
    lines = []
    for iteration in range(1, max(accuracy_by_iteration) + 1):
        result = {
            "training_iteration": iteration,
            "rollout": {"response_length_mean": 20.0 + iteration, "truncation_ratio": 0.1},
            "learners": {"default_policy": {"entropy": entropy}},
            "env_runners": {"num_env_steps_sampled_lifetime": samples_per_iteration * iteration},
        }
        if iteration == 1:
            result["evaluation_before_training"] = {"sums": {"avg@4": accuracy_by_iteration[0]}}
        if iteration in accuracy_by_iteration:
            result["evaluation"] = {"sums": {"avg@4": accuracy_by_iteration[iteration]}}
        lines.append(json.dumps(result))
    (path / "result.json").write_text("\n".join(lines) + "\n")
    return path


def test_report_rows_are_means_over_seeds_and_name_trials_without_results(tmp_path):
    trials = [
        _write_trial(tmp_path / "a", "naive GRPO", 0, {0: 0.3, 2: 0.4, 4: 0.5}),
        _write_trial(tmp_path / "b", "naive GRPO", 1, {0: 0.3, 2: 0.6, 4: 0.3}, samples_per_iteration=100),
        _write_trial(tmp_path / "c", "+ dynamic sampling", 0, {0: 0.3, 2: 0.2, 4: 0.4}, entropy=0.9),
        tmp_path / "crashed",
    ]
    (tmp_path / "crashed").mkdir()
    markdown, png, missing = write_report(trials, tmp_path, metric=METRIC, target=0.5)
    assert missing == ["crashed"]
    text = markdown.read_text()
    rows = {
        line.split(" | ")[0].strip("| "): line.split(" | ")
        for line in text.splitlines()
        if line.startswith("| ") and "---" not in line
    }
    grpo, dapo = rows["naive GRPO"], rows["+ dynamic sampling"]
    # final 0.5 and 0.3: mean 0.4, std 0.1; best 0.5 and 0.6: mean 0.55
    assert grpo[1:4] == ["2", "0.400 ± 0.100", "0.550"]
    # seed 0 reaches 0.5 at iteration 4 (512 samples), seed 1 at iteration 2 (200 samples)
    assert grpo[4:6] == ["3.0 (2/2)", "356"]
    assert dapo[1:6] == ["1", "0.400 ± 0.000", "0.400", "not reached (0/1)", "–"]
    assert dapo[6] == "0.900" and grpo[6] == "0.500"
    assert "before training: 0.300" in text and "Target fixed before the run: 0.50" in text
    assert "left out: crashed" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_without_any_validation_is_an_error(tmp_path):
    (tmp_path / "t").mkdir()
    with pytest.raises(ValueError, match="has validation results"):
        write_report([tmp_path / "t"], tmp_path, metric=METRIC, target=0.5)


def test_sum_problems_cycle_through_lengths_and_splits_are_disjoint():
    train, test = generate_sum_problems("train", 600), generate_sum_problems("test", 60)
    assert {p.prompt_text for p in train}.isdisjoint(p.prompt_text for p in test)
    for problems in (train, test):
        lengths = [len(parse_sum_question(p.prompt_text)[1]) for p in problems]
        assert lengths[: 2 * MAX_ADDENDS] == [*range(1, MAX_ADDENDS + 1)] * 2
        for p in problems:
            start, addends = parse_sum_question(p.prompt_text)
            assert p.ground_truth == str(start + sum(addends))


@pytest.mark.parametrize("split, n", [("test", 10_000), ("train", 0), ("validation", 10)])
def test_sum_problem_counts_and_splits_are_checked(split, n):
    with pytest.raises(ValueError, match="num_problems|split"):
        generate_sum_problems(split, n)


def test_every_warm_start_style_is_scored_right_and_lengths_grow_with_the_addends():
    problem = generate_sum_problems("train", 6)[5]  # six addends
    start, addends = parse_sum_question(problem.prompt_text)
    lengths = {}
    for _, style in SUMS_ANSWER_STYLES:
        answer = sums_answer(problem.prompt_text, style)
        assert compute_score(answer, problem.ground_truth)["acc"], (style, answer)
        lengths[style] = len(answer)
    assert lengths["direct"] < lengths["scratchpad"] < lengths["spaced"]
    assert sums_answer(problem.prompt_text, "scratchpad").splitlines()[:-1] == scratchpad_lines(start, addends)
