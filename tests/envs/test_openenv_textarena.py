"""A TextArena game served over OpenEnv (envs/openenv_servers/textarena_game.py) and played by `dapo_openenv`: the
player sees, move by move, what `dapo_textarena` shows in process for the same game and seed, and is rated the same.

The game: GuessTheNumber of 1 to 10 within 4 guesses, one server process for the module (about 7 s to start).
"""

from __future__ import annotations

import sys

import pytest

from envs.openenv_env import OpenEnvEnv
from envs.openenv_servers.textarena_game import create_textarena_app
from envs.textarena_env import TextArenaEnv

pytestmark = pytest.mark.engine  # the tests start environment server processes

GAME = "GuessTheNumber-v0"
OPTIONS = {"min_number": 1, "max_number": 10, "max_turns": 4}
ADAPTER = "envs.openenv_servers.textarena_game:TextArenaGameAdapter"
RATING = ("score", "acc", "pred", "invalid_moves")


def textarena_command(game: str = GAME, options: str = '{"min_number": 1, "max_number": 10, "max_turns": 4}'):
    return [sys.executable, "-m", "envs.openenv_servers.textarena_game", "--port", "{port}", "--game", game,
            "--game-options", options]  # fmt: skip


@pytest.fixture(scope="module")
def served():
    env = OpenEnvEnv({"server_command": textarena_command(), "adapter": ADAPTER, "num_problems": 8})
    yield env
    env.close()


@pytest.fixture(scope="module")
def in_process():
    return TextArenaEnv({"game": GAME, "game_options": OPTIONS, "num_problems": 8})


def episode(env, problem_index: int, moves: list[str]) -> list[tuple]:
    """A twin's episode: the reset's messages, then per move (messages, reward, terminated, truncated) and the
    rating of the move that ended the game (None before)."""
    twin = env.spawn()
    messages, _ = twin.reset(options={"problem_index": problem_index})
    turns: list[tuple] = [(messages,)]
    for move in moves:
        messages, reward, terminated, truncated, info = twin.step(move)
        rating = tuple(info[key] for key in RATING) if terminated else None
        turns.append((messages, reward, terminated, truncated, rating))
        if terminated:
            break
    return turns


@pytest.mark.parametrize(
    "problem_index, moves, ending",
    [
        # Seed 0's number is 7: five guesses reach the game's turn limit (its max_turns counts from 0), which
        # gives the last guess's closeness, 1 - |1 - 7| / (10 - 1) = 1/3: partial credit, not a win.
        (0, ["[5]", "I think [3]", "[4]", "[2]", "[1]"], (1 - 6 / 9, False, "[1]", 0)),
        # Seed 3's number is 4: a reply without a move is refused and counted, and [4] wins (reward 1).
        (3, ["[1]", "no idea", "[10]", "[4]"], (1.0, True, "[4]", 1)),
    ],
)
def test_the_served_game_is_the_in_process_game_move_by_move(served, in_process, problem_index, moves, ending):
    over_server = episode(served, problem_index, moves)
    assert over_server == episode(in_process, problem_index, moves)
    assert "[5]" in over_server[0][0][0]["content"]  # the rules, which ask for the guess in brackets
    assert over_server[-1][2:4] == (True, False) and over_server[-1][4] == pytest.approx(ending)
    assert all(not turn[2] for turn in over_server[1:-1])


def test_a_game_the_env_runner_cuts_is_not_a_win(served):
    twin = served.spawn()
    twin.reset(options={"problem_index": 1})
    twin.step("[5]")
    reward, info = twin.finish()
    assert (reward, info["acc"], info["pred"], info["data_source"]) == (0.0, False, "[5]", "openenv/textarena")


def test_the_server_refuses_a_game_that_is_not_a_textarena_game_naming_the_close_ones():
    with pytest.raises(ValueError, match=r"'game'='GuessTheNumbr-v0' is not a TextArena game id; close ones: \["):
        create_textarena_app("GuessTheNumbr-v0")
