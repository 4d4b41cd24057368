"""Who plays each seat: RLlib's policy_mapping_fn asked once per request, and a bad answer named."""

import pytest
from ray.rllib.core import DEFAULT_MODULE_ID

from dapo_rllib.rollout.matchups import LeagueDraw, matchup_for, shared_self_play, versus, versus_league

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


def test_a_league_request_plays_the_snapshot_drawn_for_it_whoever_asks():
    league = LeagueDraw({"league_0": 0.5, "league_4": 0.5}, seed=0)
    draws = [matchup_for(request, versus_league, KNOWN, league) for request in range(40)]
    assert draws == [matchup_for(request, versus_league, KNOWN, league) for request in range(40)]
    for request, matchup in enumerate(draws):
        trained, opponent = ("player_0", "player_1") if request % 2 == 0 else ("player_1", "player_0")
        assert matchup[trained] == DEFAULT_MODULE_ID and matchup[opponent] in {"league_0", "league_4"}
    opponents = [matchup[agent] for matchup in draws for agent in matchup if matchup[agent] != DEFAULT_MODULE_ID]
    assert 10 <= opponents.count("league_0") <= 30  # even odds over 40 draws


def test_a_snapshot_at_zero_odds_is_never_drawn():
    league = LeagueDraw({"league_0": 0.0, "league_4": 1.0}, seed=3)
    assert {matchup_for(request, versus_league, KNOWN, league)["player_1"] for request in range(0, 40, 2)} == {
        "league_4"
    }


def test_versus_league_without_a_league_says_how_to_get_one():
    with pytest.raises(ValueError, match=r"versus_league draws from a league: set league_size >= 1"):
        matchup_for(1, versus_league, KNOWN)
