"""The learner connector pieces on real RLlib episodes shaped like the env runner's."""

import numpy as np
import pytest
from ray.rllib.core.columns import Columns as RLlibColumns

from dapo_rllib.algorithm.connectors import GroupAdvantages
from dapo_rllib.algorithm.dynamic_sampling import group_episodes, informative_groups, without_broken_tasks
from dapo_rllib.columns import Columns, Extras
from tests.support.episodes import PAD, episode, run_pieces, turns_episode


def test_dapo_columns_use_rllibs_names_for_rllibs_columns():
    for name in ("OBS", "ACTIONS", "ADVANTAGES", "LOSS_MASK"):
        assert getattr(Columns, name) == getattr(RLlibColumns, name), name


def test_padding_left_for_prompts_right_for_responses():
    eps = [episode([5, 6, 7], [8], 1.0, 0), episode([9], [10, 11, 12], -1.0, 0)]
    b = run_pieces(eps)
    np.testing.assert_array_equal(b[Columns.OBS], [[5, 6, 7], [PAD, PAD, 9]])
    np.testing.assert_array_equal(b[Columns.PROMPT_MASK], [[1, 1, 1], [0, 0, 1]])
    np.testing.assert_array_equal(b[Columns.ACTIONS], [[8, PAD, PAD], [10, 11, 12]])
    np.testing.assert_array_equal(b[Columns.RESPONSE_MASK], [[1, 0, 0], [1, 1, 1]])
    np.testing.assert_array_equal(b[Columns.LOSS_MASK], b[Columns.RESPONSE_MASK])


def test_vllm_log_probs_are_right_padded_with_the_responses():
    eps = [
        episode([5], [8], 1.0, 0, rollout_logp=[-0.5]),
        episode([9], [10, 11, 12], -1.0, 0, rollout_logp=[-1.0, -2.0, -3.0]),
    ]
    np.testing.assert_array_equal(run_pieces(eps)[Columns.ROLLOUT_LOGP], [[-0.5, 0, 0], [-1.0, -2.0, -3.0]])


def test_group_advantages_per_group_broadcast_over_tokens():
    # Group 7: scores (1, -1) -> mean 0, unbiased std sqrt(2) -> +-0.7071; group 3: one member -> 1/(1+eps).
    eps = [episode([1], [2, 3], 1.0, 7), episode([4], [5], 1.0, 3), episode([1], [6, 7, 8], -1.0, 7)]
    b = run_pieces(eps)
    adv = b[Columns.ADVANTAGES]
    np.testing.assert_allclose(adv[0], [0.70710, 0.70710, 0.0], atol=1e-4)
    np.testing.assert_allclose(adv[1], [1.0, 0.0, 0.0], atol=1e-4)
    np.testing.assert_allclose(adv[2], [-0.70710, -0.70710, -0.70710], atol=1e-4)


def test_advantage_estimator_is_chosen_by_name():
    # Dr. GRPO: group 7 centred only, (1, -1) - 0; group 3 (one member) keeps its score.
    eps = [episode([1], [2, 3], 1.0, 7), episode([4], [5], 0.5, 3), episode([1], [6, 7, 8], -1.0, 7)]
    adv = run_pieces(eps, estimator="dr_grpo")[Columns.ADVANTAGES]
    np.testing.assert_allclose(adv, [[1.0, 1.0, 0.0], [0.5, 0.0, 0.0], [-1.0, -1.0, -1.0]])
    with pytest.raises(ValueError, match="unknown adv_estimator 'ppo'; valid advantage estimators: grpo, dr_grpo"):
        GroupAdvantages(estimator="ppo")


def test_overlong_filtering_masks_only_truncated_responses_from_the_loss():
    eps = [episode([1], [2, 3], 1.0, 0, truncated=True), episode([1], [4], -1.0, 0)]
    on = run_pieces(eps, overlong_filtering=True)
    np.testing.assert_array_equal(on[Columns.LOSS_MASK], [[0, 0], [1, 0]])
    np.testing.assert_array_equal(on[Columns.RESPONSE_MASK], [[1, 1], [1, 0]])
    off = run_pieces(eps, overlong_filtering=False)
    np.testing.assert_array_equal(off[Columns.LOSS_MASK], [[1, 1], [1, 0]])


def test_empty_response_is_an_error():
    with pytest.raises(ValueError, match="empty response"):
        run_pieces([episode([1], [], 1.0, 0)])


def test_informative_groups_keeps_mixed_and_single_member_groups():
    eps = (
        [episode([1], [2], 1.0, 0), episode([1], [2], 1.0, 0)]  # all correct
        + [episode([1], [2], -1.0, 1), episode([1], [2], -1.0, 1)]  # all wrong
        + [episode([1], [2], 1.0, 2), episode([1], [2], -1.0, 2)]  # mixed
        + [episode([1], [2], -1.0, 3)]  # one member
    )
    groups = group_episodes(eps)
    assert [len(g) for g in groups] == [2, 2, 2, 1]
    kept = informative_groups(groups, Extras.ACC)
    assert [g.group_id for g in kept] == [2, 3]


def test_groups_of_broken_tasks_are_dropped_with_a_warning(caplog):
    broken = "test 0 fails without calling the candidate: AssertionError"
    eps = [
        turns_episode([1], [([2], [-1.0], [])], 1.0, 0),
        turns_episode([1], [([2], [-1.0], [])], -1.0, 0),
        turns_episode([1], [([2], [-1.0], [])], -1.0, 1, broken_task=broken),
        turns_episode([1], [([2], [-1.0], [])], 1.0, 1, broken_task=broken),
    ]
    with caplog.at_level("WARNING", logger="dapo_rllib.algorithm.dynamic_sampling"):
        kept = without_broken_tasks(group_episodes(eps))
    assert [g.group_id for g in kept] == [0]
    assert caplog.messages == [f"dropped the group of a broken task (not trained on): {broken}"]


def test_dynamic_sampling_groups_and_filters_multi_turn_episodes_by_their_outcome():
    turns = [([7], [-1.0], [30]), ([8], [-1.0], [])]
    eps = [
        turns_episode([1], turns, 1.0, 4),
        episode([1], [2], -1.0, 4),  # mixed: a two-turn success and a one-turn failure
        turns_episode([1], turns, -1.0, 5),
        turns_episode([1], turns, -1.0, 5),  # all wrong
    ]
    kept = informative_groups(group_episodes(eps), Extras.ACC)
    assert [[len(ep) for ep in g.episodes] for g in kept] == [[2, 1]]


def test_a_multi_turn_episode_is_one_sequence_with_only_the_models_tokens_in_the_loss():
    # Turn 1: the model samples [7, 8], the environment adds [30, 31, 32]; turn 2: the model samples [9].
    two_turns = turns_episode([5, 6], [([7, 8], [-0.5, -0.25], [30, 31, 32]), ([9], [-0.125], [])], 1.0, 0)
    one_turn = episode([5, 6], [7], -1.0, 0)
    b = run_pieces([two_turns, one_turn])
    np.testing.assert_array_equal(b[Columns.ACTIONS], [[7, 8, 30, 31, 32, 9], [7, PAD, PAD, PAD, PAD, PAD]])
    np.testing.assert_array_equal(b[Columns.RESPONSE_MASK], [[1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(b[Columns.LOSS_MASK], [[1, 1, 0, 0, 0, 1], [1, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(b[Columns.ROLLOUT_LOGP][0], [-0.5, -0.25, 0, 0, 0, -0.125])
    # The group advantage of the episode's return (+1 against -1) on every one of the model's
    # tokens; 0 on the environment's, which are out of the loss.
    advantages = b[Columns.ADVANTAGES][0]
    assert advantages[0] > 0 and np.all(advantages[[0, 1, 5]] == advantages[0])
    np.testing.assert_array_equal(advantages[[2, 3, 4]], [0, 0, 0])


def test_overlong_filtering_masks_every_turn_of_a_truncated_episode():
    cut = turns_episode([5], [([7], [-1.0], [30]), ([8, 9], [-1.0, -1.0], [])], -1.0, 0, truncated=True)
    b = run_pieces([cut, episode([5], [7], 1.0, 0)], overlong_filtering=True)
    np.testing.assert_array_equal(b[Columns.LOSS_MASK], [[0, 0, 0, 0], [1, 0, 0, 0]])
