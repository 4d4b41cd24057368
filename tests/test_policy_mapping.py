"""Who plays each seat: RLlib's policy_mapping_fn asked once per request, and a bad answer named."""

import pytest
from ray.rllib.core import DEFAULT_MODULE_ID

from dapo_rllib.rollout.matchups import matchup_for, shared_self_play, versus

KNOWN = {DEFAULT_MODULE_ID, "heuristic", "random_legal"}


def test_shared_self_play_plays_both_seats():
    assert matchup_for(0, shared_self_play, KNOWN) == {"player_0": DEFAULT_MODULE_ID, "player_1": DEFAULT_MODULE_ID}


def test_against_an_opponent_the_trained_seat_alternates_by_request():
    assert matchup_for(6, versus("heuristic"), KNOWN) == {"player_0": DEFAULT_MODULE_ID, "player_1": "heuristic"}
    assert matchup_for(7, versus("heuristic"), KNOWN) == {"player_0": "heuristic", "player_1": DEFAULT_MODULE_ID}


def test_a_mapping_fn_sees_the_request_in_the_episode_id():
    seen = []
    matchup_for(3, lambda agent_id, episode, **kwargs: seen.append((agent_id, episode.id_)) or "heuristic", KNOWN)
    assert seen == [("player_0", "r3"), ("player_1", "r3")]


def test_an_unknown_policy_id_is_a_clear_error_naming_it():
    with pytest.raises(
        ValueError,
        match=r"policy_mapping_fn returned 'bob' for agent 'player_1' \(request 4\); known policies: "
        r"\['default_policy', 'heuristic', 'random_legal'\]",
    ):
        matchup_for(4, versus("bob"), KNOWN)
