"""The game loop with the tiny model's tokenizer and a scripted stand-in for vLLM (replies chosen by the test):
each model seat's sequence, scripted opponents, cuts, failures and seeds. The real engine plays games in
the self-play runs."""

import threading
from types import SimpleNamespace

import pytest
from ray.rllib.core import DEFAULT_MODULE_ID
from transformers import AutoTokenizer

from dapo_rllib.columns import Info
from dapo_rllib.rollout.game_loop import GameLoop, GameStart
from dapo_rllib.rollout.turn_loop import EndReason, TurnLoop
from dapo_rllib.tasks.chat_turns import TurnRenderer
from dapo_rllib.tasks.env_failures import RAISED, TIMEOUT
from dapo_rllib.tasks.games.take_away import TakeAway, TakeAwayEnv

PILE_13 = 0  # problem 0 of the training split: 13 stones
LOGP = -0.5


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path):
    return AutoTokenizer.from_pretrained(tiny_model_path)


class ScriptedEngine:
    """Stands in for vLLM's generate: replies `reply(prompt text)`, tokenized, ended by the end-of-turn token,
    cut to the request's max_tokens; records each request's seed and policy."""

    def __init__(self, tokenizer, reply):
        self.tokenizer, self.reply, self.seeds, self.policies = tokenizer, reply, [], []

    def generate(self, prompts, params, policies):
        outputs = []
        for prompt, param, policy in zip(prompts, params, policies):
            self.seeds.append(param.seed)
            self.policies.append(policy)
            ids = self.tokenizer.encode(self.reply(self.tokenizer.decode(prompt)), add_special_tokens=False)
            ids.append(self.tokenizer.eos_token_id)
            cut = len(ids) > param.max_tokens
            ids = ids[: param.max_tokens]
            completion = SimpleNamespace(
                token_ids=ids,
                logprobs=SimpleNamespace(logprobs=[LOGP] * len(ids)),
                finish_reason="length" if cut else "stop",
                stop_reason=None,
            )
            outputs.append(SimpleNamespace(outputs=[completion]))
        return outputs


def game_loop(tokenizer, reply, *, max_turns=8, budget=512, env_timeout_s=10):
    engine = ScriptedEngine(tokenizer, reply)
    turns = TurnLoop(
        generate=engine.generate,
        make_params=lambda seed, max_tokens, stop: SimpleNamespace(seed=seed, max_tokens=max_tokens),
        tokenizer=tokenizer,
        parser=None,
        max_turns=max_turns,
        budget=budget,
        seed=lambda stream: hash(stream) % 1000,
        env_timeout_s=env_timeout_s,
    )
    renderer = TurnRenderer(tokenizer)
    return GameLoop(turns, renderer, lambda messages: (renderer.prompt_ids(messages), False)), engine


def play(loop, start, env=None):
    (game,) = loop.start(env or TakeAwayEnv(), [start])
    loop.run([game])
    return game


def conversation_ids(tokenizer, messages):
    return tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False)


def test_a_model_seats_sequence_is_its_moves_and_what_the_game_showed_it(tokenizer):
    # Always [1] against best play from 13: 12, 11 (heuristic 1), 10, 8 (2), 7, 4 (3), 3, 0 (3): the heuristic wins.
    loop, _ = game_loop(tokenizer, lambda prompt: "[1]")
    game = play(loop, GameStart(PILE_13, {"player_0": (0,)}, {"player_1": "heuristic"}))
    seat = game.seats["player_0"]
    assert (game.end, len(seat.turns), [turn.reward for turn in seat.turns]) == (EndReason.ENV, 4, [0, 0, 0, -1.0])
    assert (seat.final_info[Info.OUTCOME], seat.final_info[Info.SCORE]) == ("loss", -1.0)
    shown = [
        "Player 1 took 1. 11 stones are left. Your move.",
        "Player 1 took 2. 8 stones are left. Your move.",
        "Player 1 took 3. 4 stones are left. Your move.",
    ]
    assert [tokenizer.decode(turn.env_ids) for turn in seat.turns[:3]] == [
        f"\n<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n" for text in shown
    ]
    # Replayed: the seat's ids are the whole conversation it had, rendered at once.
    first = TakeAwayEnv().reset(options={Info.PROBLEM_INDEX: PILE_13})[0]["player_0"]
    conversation = list(first)
    for text in shown:
        conversation += [{"role": "assistant", "content": "[1]"}, {"role": "user", "content": text}]
    conversation.append({"role": "assistant", "content": "[1]"})
    ids = seat.prompt_ids + seat.response_ids
    assert ids == conversation_ids(tokenizer, conversation)[: len(ids)]
    assert sum(len(turn.model_ids) for turn in seat.turns) == 4 * 4  # "[", "1", "]", end of turn
    assert all(turn.logp == [LOGP] * len(turn.model_ids) for turn in seat.turns)


def test_shared_self_play_gives_both_seats_their_episode_and_outcome(tokenizer):
    # Both take 3 from 13: 10, 7, 4, 1, then player 0's [3] is refused and loses.
    loop, engine = game_loop(tokenizer, lambda prompt: "[3]")
    game = play(loop, GameStart(PILE_13, {"player_0": (0, 7, 0), "player_1": (0, 7, 1)}))
    first, second = game.seats["player_0"], game.seats["player_1"]
    assert (len(first.turns), len(second.turns)) == (3, 2)
    assert (first.turns[-1].reward, second.turns[-1].reward) == (-1.0, 1.0)
    assert (first.final_info[Info.INVALID_MOVES], second.final_info[Info.INVALID_MOVES]) == (1, 0)
    assert tokenizer.decode(second.prompt_ids).endswith(
        "\nPlayer 0 took 3. 10 stones are left. Your move.<|im_end|>\n<|im_start|>assistant\n"
    )
    # Each request's seed is its seat's stream and the seat's turn: seats 0, 1, 0, 1, 0.
    streams = [(0, 7, 0, 0), (0, 7, 1, 0), (0, 7, 0, 1), (0, 7, 1, 1), (0, 7, 0, 2)]
    assert engine.seeds == [hash(stream) % 1000 for stream in streams]


def test_a_seat_that_never_moved_has_no_turn_but_its_outcome(tokenizer):
    loop, _ = game_loop(tokenizer, lambda prompt: "two")
    game = play(loop, GameStart(PILE_13, {"player_0": (0,), "player_1": (1,)}))
    assert game.seats["player_1"].turns == [] and game.seats["player_1"].final_info[Info.OUTCOME] == "win"
    assert game.seats["player_0"].final_info["reason"] == "Player 0 made an invalid move (no [number])"


def test_a_seat_out_of_turns_cuts_the_game_to_a_draw(tokenizer):
    loop, _ = game_loop(tokenizer, lambda prompt: "[1]", max_turns=2)
    game = play(loop, GameStart(PILE_13, {"player_0": (0,), "player_1": (1,)}))
    assert game.end == EndReason.MAX_TURNS
    for seat in game.seats.values():
        assert (len(seat.turns), seat.turns[-1].reward, seat.final_info[Info.OUTCOME]) == (2, 0.0, "draw")
        assert seat.end == EndReason.MAX_TURNS


def test_a_seat_whose_next_messages_would_pass_its_budget_cuts_the_game(tokenizer):
    loop, _ = game_loop(tokenizer, lambda prompt: "[1]", budget=12)
    game = play(loop, GameStart(PILE_13, {"player_0": (0,)}, {"player_1": "random_legal"}))
    seat = game.seats["player_0"]
    assert (game.end, seat.truncated, len(seat.turns), seat.final_info[Info.OUTCOME]) == (
        EndReason.BUDGET,
        True,
        1,
        "draw",
    )


class FailingTakeAway(TakeAway):
    def play(self, seat, move):
        if self.pile < 13:
            raise RuntimeError("the game broke")
        super().play(seat, move)


class FailingTakeAwayEnv(TakeAwayEnv):
    new_game = FailingTakeAway


def test_a_failing_game_fails_every_model_seat(tokenizer):
    loop, _ = game_loop(tokenizer, lambda prompt: "[1]")
    game = play(loop, GameStart(PILE_13, {"player_0": (0,), "player_1": (1,)}), env=FailingTakeAwayEnv())
    assert game.end == EndReason.ENV_ERROR
    for seat in game.seats.values():
        assert seat.final_info[Info.ENV_ERROR] == RAISED and "the game broke" in seat.final_info[Info.ENV_ERROR_MESSAGE]


class StuckTakeAway(TakeAway):
    """A game whose move never returns until the test releases it."""

    released = threading.Event()

    def play(self, seat, move):
        self.released.wait()
        super().play(seat, move)


class StuckTakeAwayEnv(TakeAwayEnv):
    new_game = StuckTakeAway


def test_a_move_that_never_returns_fails_every_model_seat_at_the_timeout(tokenizer):
    loop, _ = game_loop(tokenizer, lambda prompt: "[1]", env_timeout_s=0.5)
    try:
        game = play(loop, GameStart(PILE_13, {"player_0": (0,), "player_1": (1,)}), env=StuckTakeAwayEnv())
    finally:
        StuckTakeAway.released.set()  # lets the abandoned call's thread finish
    assert game.end == EndReason.ENV_ERROR
    for seat in game.seats.values():
        assert seat.final_info[Info.ENV_ERROR] == TIMEOUT


def test_a_snapshots_seat_samples_from_the_snapshot_in_the_same_batch(tokenizer):
    # Both take 3 from 13, player 1 played by a league snapshot: its requests name it, player 0's the trained policy.
    loop, engine = game_loop(tokenizer, lambda prompt: "[3]")
    start = GameStart(PILE_13, {"player_0": (0,), "player_1": (1,)}, policies={"player_1": "league_4"})
    game = play(loop, start)
    assert (game.seats["player_0"].policy, game.seats["player_1"].policy) == (DEFAULT_MODULE_ID, "league_4")
    # Moves by player 0, 1, 0, 1, 0 (the last refused): 10, 7, 4, 1.
    assert engine.policies == [DEFAULT_MODULE_ID, "league_4", DEFAULT_MODULE_ID, "league_4", DEFAULT_MODULE_ID]
