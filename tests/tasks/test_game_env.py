"""Games of two players as RLlib multi-agent environments (`GameEnv`), on the built-in take-away game."""

import random
import re

import pytest
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from dapo_rllib.columns import Info, Outcome
from dapo_rllib.models.tiny.answers import take_away_answer, take_away_best_first_move, take_away_openings
from dapo_rllib.tasks.game_env import AGENTS
from dapo_rllib.tasks.games.take_away import RULES, TakeAway, TakeAwayEnv, parse_move

# Problem i of the training split is seed i: seed 0 starts with 13 stones, seed 6 with 8.
PILE_13, PILE_8 = 0, 6


def play_out(env, moves_by_agent):
    """Play a game to its end with `moves_by_agent[agent](env)`; the last step's rewards and infos."""
    obs, _ = env.reset(options={Info.PROBLEM_INDEX: PILE_13})
    while True:
        (agent,) = obs
        obs, rewards, terminated, _, infos = env.step({agent: moves_by_agent[agent](env, agent)})
        if terminated["__all__"]:
            return rewards, infos


def test_a_game_is_an_rllib_multi_agent_env_whose_openings_repeat_for_a_seed():
    env = TakeAwayEnv()
    assert isinstance(env, MultiAgentEnv) and env.possible_agents == ["player_0", "player_1"]
    twin = env.spawn()
    first = env.reset(options={Info.PROBLEM_INDEX: PILE_13})
    assert twin.reset(options={Info.PROBLEM_INDEX: PILE_13}) == first
    obs, infos = first
    assert list(obs) == ["player_0"]
    assert obs["player_0"] == [
        {
            "role": "user",
            "content": RULES.format(player="Player 0", opponent="Player 1") + "\n13 stones are left. Your move.",
        }
    ]
    assert infos["player_1"][Info.GROUND_TRUTH] == "TakeAway#0"


def test_the_second_mover_sees_the_rules_then_the_first_move():
    env = TakeAwayEnv()
    env.reset(options={Info.PROBLEM_INDEX: PILE_13})
    obs, rewards, terminated, truncated, _ = env.step({"player_0": "I take [3]."})
    assert (rewards, terminated, truncated) == ({}, {"__all__": False}, {"__all__": False})
    assert obs["player_1"][0]["content"].endswith("\nPlayer 0 took 3. 10 stones are left. Your move.")
    assert obs["player_1"][0]["content"].startswith("You are Player 1 in Take-away against Player 0.")
    obs, *_ = env.step({"player_1": "[2]"})
    assert obs == {"player_0": [{"role": "user", "content": "Player 1 took 2. 8 stones are left. Your move."}]}


def test_best_play_wins_from_13_stones_and_both_agents_get_their_outcome():
    # 13 = 4*3 + 1: the first mover takes 1 and keeps leaving a multiple of 4.
    heuristic = {agent: lambda env, agent: env.heuristic_move(agent) for agent in AGENTS}
    rewards, infos = play_out(TakeAwayEnv(), heuristic)
    assert rewards == {"player_0": 1.0, "player_1": -1.0}
    assert [infos[a][Info.OUTCOME] for a in AGENTS] == [Outcome.WIN, Outcome.LOSS]
    assert [infos[a][Info.ACC] for a in AGENTS] == [True, False]
    assert infos["player_0"]["reason"] == "Player 0 took the last stone"
    assert infos["player_0"][Info.INVALID_MOVES] == 0


def test_from_a_multiple_of_4_the_second_player_wins_with_best_play():
    env = TakeAwayEnv()
    obs, _ = env.reset(options={Info.PROBLEM_INDEX: PILE_8})
    rewards = {}
    while not rewards:
        (agent,) = obs
        obs, rewards, *_ = env.step({agent: env.heuristic_move(agent)})
    assert rewards == {"player_0": -1.0, "player_1": 1.0}


def test_an_invalid_move_loses_the_game_and_is_counted():
    env = TakeAwayEnv()
    env.reset(options={Info.PROBLEM_INDEX: PILE_13})
    _, rewards, terminated, _, infos = env.step({"player_0": "I take [4]"})
    assert rewards == {"player_0": -1.0, "player_1": 1.0} and terminated["__all__"]
    assert [infos[a][Info.INVALID_MOVES] for a in AGENTS] == [1, 0]
    assert infos["player_0"]["reason"] == "Player 0 made an invalid move (4)"
    assert infos["player_0"][Info.PRED] == "I take [4]" and infos["player_1"][Info.PRED] is None


def test_a_cut_game_is_a_draw():
    env = TakeAwayEnv()
    env.reset(options={Info.PROBLEM_INDEX: PILE_13})
    env.step({"player_0": "[1]"})
    ended = env.finish()
    assert {agent: reward for agent, (reward, _) in ended.items()} == {"player_0": 0.0, "player_1": 0.0}
    assert {info[Info.OUTCOME] for _, info in ended.values()} == {Outcome.DRAW}
    with pytest.raises(RuntimeError, match="no game in play"):
        env.finish()


def test_scripted_moves_are_legal():
    env = TakeAwayEnv()
    env.reset(options={Info.PROBLEM_INDEX: PILE_13})
    assert env.legal_moves("player_0") == ["[1]", "[2]", "[3]"]
    assert env.random_move("player_0", random.Random(0)) in env.legal_moves("player_0")
    game = TakeAway(PILE_13)
    game.pile = 2
    assert game.legal_moves(0) == ["[1]", "[2]"]
    assert parse_move("[1] no, [2]") == 2 and parse_move("two") is None


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda env: env.step({"player_1": "[1]"}),
            r"takes the move of 'player_0' alone \(its turn\), got moves of \['player_1'\]",
        ),
        (lambda env: env.reset(options={}), r"needs options=\{'problem_index': i\} with 0 <= i < 1000, got None"),
        (
            lambda env: env.legal_moves("player_2"),
            r"unknown agent 'player_2'; the agents are \['player_0', 'player_1'\]",
        ),
        (lambda env: TakeAwayEnv({"split": "dev"}), r"TakeAwayEnv 'split'='dev'; expected one of \['test', 'train'\]"),
        (lambda env: TakeAwayEnv({"game": "Chess"}), r"unknown TakeAwayEnv config keys \['game'\]"),
    ],
)
def test_bad_input_is_a_clear_error(call, message):
    env = TakeAwayEnv()
    env.reset(options={Info.PROBLEM_INDEX: PILE_13})
    with pytest.raises(ValueError, match=message):
        call(env)


def test_the_test_split_holds_other_seeds():
    env = TakeAwayEnv({"split": "test", "num_problems": 3})
    env.reset(options={Info.PROBLEM_INDEX: 0})
    _, infos = env.reset(options={Info.PROBLEM_INDEX: 2})
    assert env.num_problems == 3 and infos["player_0"][Info.GROUND_TRUTH] == f"TakeAway#{2**31 + 2}"


@pytest.mark.parametrize("seat, style", [(0, "best"), (1, "random"), (1, "no brackets")])
def test_the_tiny_models_warm_start_games_are_the_envs_games(seat, style):
    # Replayed in the environment, the other player's moves read from the messages: each message is the env's.
    opening = take_away_openings(range(1))[seat]
    me, other = AGENTS[seat], AGENTS[1 - seat]
    env = TakeAwayEnv()
    obs, _ = env.reset(options={Info.PROBLEM_INDEX: 0})
    rewards = {}
    for message in [*opening.messages, *take_away_answer(opening, style)]:
        if isinstance(message, str):  # the seat's move
            obs, rewards, *_ = env.step({me: message})
            continue
        if other in obs:
            (taken,) = re.findall(rf"Player {1 - seat} took (\d)", message["content"])
            obs, *_ = env.step({other: f"[{taken}]"})
        assert obs == {me: [message]}
    # The answer ends where the game does, or where the other player's move ends it.
    assert rewards or other in obs


def test_the_tiny_models_held_out_measure_is_best_play_at_the_opening():
    opening = take_away_openings(range(1))[0]  # 13 stones: best play takes 1
    assert take_away_best_first_move(opening, "[1]") and not take_away_best_first_move(opening, "[2]")
