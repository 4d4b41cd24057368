"""Token-budget micro-batches: every sequence once, within the budget, little padding; and the
driver's split of a batch into whole groups per learner."""

import numpy as np
import pytest
import torch

from dapo_rllib.algorithm.micro_batching import padding_fraction, plan_for_batch, plan_micro_batches, take
from dapo_rllib.columns import Columns


def test_every_sequence_lands_in_exactly_one_micro_batch_within_the_budget():
    rng = np.random.default_rng(0)
    prompts = torch.tensor(rng.integers(10, 60, size=200))
    responses = torch.tensor(rng.integers(1, 300, size=200))
    plan = plan_micro_batches(prompts, responses, max_tokens=2048)
    rows = torch.cat([mb.rows for mb in plan])
    assert sorted(rows.tolist()) == list(range(200))
    for mb in plan:
        assert mb.padded_tokens <= 2048
        assert mb.prompt_width == int(prompts[mb.rows].max()) and mb.response_width == int(responses[mb.rows].max())


def test_sorting_by_length_keeps_padding_small():
    rng = np.random.default_rng(1)
    prompts = torch.tensor(rng.integers(30, 50, size=128))
    responses = torch.tensor(rng.integers(20, 257, size=128))
    plan = plan_micro_batches(prompts, responses, max_tokens=4096)
    real = int(prompts.sum() + responses.sum())
    padded = sum(mb.padded_tokens for mb in plan)
    # In one piece the batch would be padded to 49 + 256 per row: 40% or more padding.
    assert 1 - real / (128 * int(prompts.max() + responses.max())) > 0.3
    assert 1 - real / padded < 0.15


def test_a_budget_below_one_sequence_names_the_sequence():
    with pytest.raises(
        ValueError,
        match=r"max_tokens_per_micro_batch=100 is smaller than sequence 1 .*30 prompt \+ 90 response = 120 tokens",
    ):
        plan_micro_batches(torch.tensor([10, 30]), torch.tensor([20, 90]), max_tokens=100)


def test_take_trims_only_padding():
    batch = {
        Columns.OBS: torch.tensor([[0, 0, 5, 6], [0, 7, 8, 9]]),
        Columns.PROMPT_MASK: torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1]], dtype=torch.float32),
        Columns.ACTIONS: torch.tensor([[1, 2, 0], [3, 4, 0]]),
        Columns.RESPONSE_MASK: torch.tensor([[1, 1, 0], [1, 1, 0]], dtype=torch.float32),
        Columns.ADVANTAGES: torch.tensor([[0.5, 0.5, 0.0], [-1.0, -1.0, 0.0]]),
    }
    (only,) = plan_for_batch(batch, max_tokens=100)
    piece = take(batch, only)
    assert only.prompt_width == 3 and only.response_width == 2
    assert piece[Columns.OBS].tolist() == [[7, 8, 9], [0, 5, 6]]  # longest first
    assert piece[Columns.ACTIONS].tolist() == [[3, 4], [1, 2]]
    assert piece[Columns.ADVANTAGES].tolist() == [[-1.0, -1.0], [0.5, 0.5]]
    assert padding_fraction([only], batch) == pytest.approx(1 - 9 / 10)


def test_each_learner_gets_whole_groups_and_the_same_number_of_mini_batches(ray_session):
    import ray

    from dapo_rllib.algorithm.dapo import DAPOConfig, learner_data
    from dapo_rllib.algorithm.dynamic_sampling import Group

    config = DAPOConfig().training(group_size=4, train_batch_size_prompts=8, minibatch_size_prompts=4)
    names = [[f"g{g}e{e}" for e in range(4)] for g in range(8)]
    groups = [Group(g, episodes) for g, episodes in enumerate(names)]
    data = learner_data(groups, num_learners=2, cfg=config)
    shards = [ray.get(ref) for ref in data["episodes_refs"]]
    assert shards == [[ep for g in names[:4] for ep in g], [ep for g in names[4:] for ep in g]]
    # 2 groups of each learner per optimizer step, 2 steps each.
    assert data["minibatch_size"] == 2 * 4 and data["num_total_minibatches"] == 2
    single = learner_data(groups, num_learners=1, cfg=config)
    assert single["episodes"] == [ep for g in names for ep in g] and single["minibatch_size"] == 16
    with pytest.raises(ValueError, match="7 groups cannot be shared whole by num_learners=2"):
        learner_data(groups[:7], num_learners=2, cfg=config)
