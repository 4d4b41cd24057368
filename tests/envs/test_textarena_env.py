"""TextArena's single-player games as DAPO environments: a game played move by move with the game's own words,
the same seed giving the same game, invalid moves counted, games that cannot run here refused at build, and a
game trained on through DAPO's real loop."""

from __future__ import annotations

import pytest

from dapo_rllib.columns import Metrics
from dapo_rllib.tasks.game_env import TEST_SEED_OFFSET
from envs.textarena_env import MULTI_PLAYER_POINTER, TextArenaEnv
from tests.support.runs import SMALL_MULTI_TURN_STEPS, tiny_config

HANOI = {"game": "TowerOfHanoi-v0", "game_options": {"num_disks": 2}, "num_problems": 4}


def test_a_game_is_played_move_by_move_and_its_reward_ends_the_episode():
    env = TextArenaEnv(HANOI)
    messages, info = env.reset(options={"problem_index": 0})
    assert (info["data_source"], info["ground_truth"]) == ("textarena/TowerOfHanoi-v0", "TowerOfHanoi-v0#0")
    (opening,) = messages
    assert opening["role"] == "user" and opening["content"].startswith("You are playing Tower of Hanoi with 2 disks.")
    assert opening["content"].endswith("Current Board: \nA: [2, 1]\nB: []\nC: []\n.")
    # The model's turn goes to the game as written; the game answers with what happened and the board.
    assert env.step("I move the small disk: [A B]") == (
        [{"role": "user", "content": "You moved disk 1 from A to B.\nCurrent Board: \nA: [2]\nB: [1]\nC: []\n."}],
        0.0,
        False,
        False,
        {},
    )
    env.step("[A C]")
    messages, reward, terminated, truncated, info = env.step("[B C]")
    assert (messages, reward, terminated, truncated) == ([], 1.0, True, False)
    assert info["acc"] is True and info["invalid_moves"] == 0 and info["pred"] == "[B C]"
    assert info["reason"] == "Congratulations! You solved the Tower of Hanoi puzzle."


def test_a_refused_move_is_counted_and_the_game_goes_on():
    env = TextArenaEnv(HANOI)
    env.reset(options={"problem_index": 1})
    (message,), reward, terminated, _, _ = env.step("[C A]")  # tower C is empty
    assert message["content"].startswith("You attempted an invalid move.") and not terminated
    env.step("[A B]")
    reward, info = env.finish()  # cut at max_turns: not a win
    assert (reward, info["acc"], info["invalid_moves"]) == (0.0, False, 1)


def test_a_group_plays_the_same_game_and_the_test_split_other_games():
    env = TextArenaEnv({"game": "GuessTheNumber-v0", "num_problems": 50})
    test = TextArenaEnv({"game": "GuessTheNumber-v0", "num_problems": 50, "split": "test"})
    assert test.problem(0).seed == TEST_SEED_OFFSET and env.problem(49).seed == 49

    def answers(twin, index):
        """The game's answers to guesses 1, 2, ... until it ends: they say the number."""
        twin.reset(options={"problem_index": index})
        steps = [twin.step("[1]")]
        while not steps[-1][2]:
            steps.append(twin.step(f"[{len(steps) + 1}]"))
        return [(messages, reward) for messages, reward, *_ in steps]

    # Twins of one problem (a group's episodes) get the same answers to the same guesses; the numbers of 50
    # games (1 to 20, found within the game's 10 turns or not) are not all one.
    assert answers(env.spawn(), 7) == answers(env.spawn(), 7)
    assert len({str(answers(env.spawn(), i)) for i in range(50)}) > 3


@pytest.mark.parametrize(
    ("game", "why"),
    [
        ("TicTacToe-v0", r"\(AssertionError: The number of players has to be 2, received 1\)"),
        # It starts with one player, as a game of two.
        ("QuantumTicTacToe-v0", r"\(its state is a TwoPlayerState\)"),
    ],
)
def test_a_game_of_several_players_is_refused_with_a_pointer_to_self_play(game, why):
    with pytest.raises(ValueError, match=f"'{game}' is a game of several players {why}") as refused:
        TextArenaEnv({"game": game})
    assert MULTI_PLAYER_POINTER in str(refused.value)


def test_an_unknown_game_is_refused_with_the_close_ids():
    with pytest.raises(
        ValueError, match=r"'GuessTheNumbr-v0' is not a TextArena game id; close ones: \['GuessTheNumber-v0'"
    ):
        TextArenaEnv({"game": "GuessTheNumbr-v0"})


def test_a_game_whose_data_cannot_be_found_is_refused_naming_it(monkeypatch, tmp_path):
    # Wordle needs NLTK's 'words' corpus, downloaded at run time. Stand-in for a machine without it: an empty
    # data path, and NLTK's download failing as it does offline (it returns False).
    nltk = pytest.importorskip("nltk")
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    monkeypatch.setattr(nltk, "download", lambda *args, **kwargs: False)
    with pytest.raises(RuntimeError, match="'Wordle-v0' needs NLTK data .* resource 'words'"):
        TextArenaEnv({"game": "Wordle-v0"})


def test_dapo_trains_on_a_game_through_its_loop(ray_session, tiny_model_path):
    # The game's rules make a long first message.
    config = tiny_config(tiny_model_path, **SMALL_MULTI_TURN_STEPS, max_prompt_length=512).environment(
        "dapo_textarena", env_config={"game": "GuessTheNumber-v0", "num_problems": 20}
    )
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(2)]
    finally:
        algo.stop()
    rollout = results[-1][Metrics.ROLLOUT]
    assert rollout[Metrics.GROUPS_KEPT] == 4 and 1 <= rollout[Metrics.TURNS_MEAN] <= 3
    assert rollout[Metrics.INVALID_MOVES] >= 0 and rollout[Metrics.ENV_ERRORS]["raised"] == 0
