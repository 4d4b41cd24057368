"""TextArena's two-player games as multi-agent environments, and the scripted opponents' moves."""

import random

import pytest

from dapo_rllib.columns import Info
from envs.textarena_versus_env import (
    TextArenaVersusEnv,
    kuhn_heuristic,
    nim_heuristic,
    nim_moves,
    tic_tac_toe_heuristic,
    tic_tac_toe_moves,
)

START = {"options": {Info.PROBLEM_INDEX: 0}}


def test_each_player_sees_the_games_messages_and_the_others_move_as_the_game_tells_it():
    env = TextArenaVersusEnv({"game": "TicTacToe-v0"})
    obs, _ = env.reset(**START)
    assert list(obs) == ["player_0"] and obs["player_0"][0]["content"].startswith("You are Player 0 in Tic Tac Toe.")
    obs, rewards, *_ = env.step({"player_0": "The centre: [4]"})
    (message,) = obs["player_1"]
    assert rewards == {} and message["content"].startswith("You are Player 1 in Tic Tac Toe.")
    assert "Player 0 placed their symbol (O) in cell 4." in message["content"]
    assert "The centre" not in message["content"]  # the move as written is not passed on


def test_a_refused_move_is_retried_once_then_loses_and_both_are_counted():
    env = TextArenaVersusEnv({"game": "TicTacToe-v0"})
    env.reset(**START)
    env.step({"player_0": "[4]"})
    obs, rewards, *_ = env.step({"player_1": "[4]"})
    assert rewards == {} and "Player 1 attempted an invalid move" in obs["player_1"][0]["content"]
    _, rewards, terminated, _, infos = env.step({"player_1": "[4]"})
    assert rewards == {"player_0": 1.0, "player_1": -1.0} and terminated["__all__"]
    assert [infos[agent][Info.INVALID_MOVES] for agent in ("player_0", "player_1")] == [0, 2]


@pytest.mark.parametrize("game", ["TicTacToe-v0", "Nim-v0"])
def test_the_heuristic_beats_random_legal_moves(game):
    env = TextArenaVersusEnv({"game": game})
    for index in range(3):
        obs, _ = env.reset(options={Info.PROBLEM_INDEX: index})
        rng = random.Random(index)
        rewards = {}
        while not rewards:
            (agent,) = obs
            move = env.heuristic_move(agent) if agent == "player_0" else env.random_move(agent, rng)
            assert move in env.legal_moves(agent)
            obs, rewards, *_ = env.step({agent: move})
        assert rewards == {"player_0": 1.0, "player_1": -1.0}


def test_tic_tac_toe_completes_its_line_then_blocks_then_takes_the_centre():
    assert tic_tac_toe_heuristic({"board": [["O", "O", ""], ["X", "X", ""], ["", "", ""]]}, 0) == "[2]"
    assert tic_tac_toe_heuristic({"board": [["O", "O", ""], ["X", "X", ""], ["", "", ""]]}, 1) == "[5]"
    assert tic_tac_toe_heuristic({"board": [["X", "X", ""], ["", "", ""], ["", "", "O"]]}, 0) == "[2]"
    assert tic_tac_toe_heuristic({"board": [["X", "", ""], ["", "", ""], ["", "", ""]]}, 0) == "[4]"
    assert tic_tac_toe_moves({"board": [["X", "", "O"], ["", "", ""], ["", "", ""]]}, 0) == [
        f"[{cell}]" for cell in (1, 3, 4, 5, 6, 7, 8)
    ]


def test_nim_leaves_a_nim_sum_of_zero():
    # 3 ^ 4 ^ 5 = 2; pile 0 goes from 3 to 3 ^ 2 = 1: take 2. From 1 ^ 1 = 0 no move wins: take 1 from the largest.
    assert nim_heuristic({"piles": [3, 4, 5]}, 0) == "[0 2]"
    assert nim_heuristic({"piles": [1, 1]}, 1) == "[0 1]"
    assert nim_moves({"piles": [0, 2]}, 0) == ["[1 1]", "[1 2]"]


def test_kuhn_bets_a_king_checks_a_jack_and_calls_with_a_queen():
    first = {"check": "...", "bet": "..."}
    facing_a_bet = {"fold": "loser", "call": "showdown"}
    cards = {0: 2, 1: 0}  # player 0 holds K, player 1 J (0 J, 1 Q, 2 K)
    assert kuhn_heuristic({"current_legal_action_tree": first, "player_cards": cards}, 0) == "[bet]"
    assert kuhn_heuristic({"current_legal_action_tree": first, "player_cards": cards}, 1) == "[check]"
    assert kuhn_heuristic({"current_legal_action_tree": facing_a_bet, "player_cards": cards}, 1) == "[fold]"
    assert kuhn_heuristic({"current_legal_action_tree": facing_a_bet, "player_cards": {0: 1, 1: 0}}, 0) == "[call]"


@pytest.mark.parametrize(
    "config, message",
    [
        ({"game": "GuessTheNumber-v0"}, "'GuessTheNumber-v0' is not a game of two players .* `dapo_textarena`"),
        ({"game": "TicTacToes-v0"}, "'TicTacToes-v0' is not a TextArena game id; close ones: .'TicTacToe-v0'"),
    ],
)
def test_a_game_that_is_not_for_two_players_is_refused(config, message):
    with pytest.raises(ValueError, match=message):
        TextArenaVersusEnv(config)


def test_a_game_without_scripted_moves_says_so():
    env = TextArenaVersusEnv({"game": "ConnectFour-v0"})
    env.reset(**START)
    with pytest.raises(
        ValueError, match="no scripted moves for 'ConnectFour-v0': its opponents must be model policies"
    ):
        env.heuristic_move("player_0")
