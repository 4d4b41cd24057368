"""What the tiny models' warm start imitates: for each task, several ways of answering, only some of them right.

Part of what RL then learns from the verifiable reward is the format, the rest is getting the task right.
The weights say how often the warm start imitates each style (`WarmStartRecipe.styles`).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass

from dapo_rllib.tasks.data.arithmetic import parse_arithmetic_question
from dapo_rllib.tasks.data.code_arithmetic import reference_solution
from dapo_rllib.tasks.data.datasets import short_repr
from dapo_rllib.tasks.data.scratchpad_sums import parse_sum_question, scratchpad_lines
from dapo_rllib.tasks.data.tool_arithmetic import parse_product_question
from dapo_rllib.tasks.game_env import SEATS
from dapo_rllib.tasks.games.take_away import TakeAway, parse_move
from dapo_rllib.tasks.rewards.code import CaseReport, call_text, feedback_text

# (weight, format) of the final line; only "Answer: {r}" satisfies the DAPO scorer.
ANSWER_STYLES = ((0.4, "Answer: {r}"), (0.3, "Answer: {r}."), (0.3, "The answer is {r}."))
# (weight, style) of a code answer; only "return" passes the tests.
CODE_ANSWER_STYLES = ((0.4, "return"), (0.3, "print"), (0.3, "wrong name"))
# (weight, style) of a sums answer, all in the right format: the scratchpad; the same with spaces
# around + and = (right as often, half as long again: long sums no longer fit the response
# limit); the answer alone (short, right only when the sum is done in one go).
SUMS_ANSWER_STYLES = ((0.4, "scratchpad"), (0.3, "spaced"), (0.3, "direct"))
# (weight, style) of a tool-arithmetic answer: the python tool with the right expression, then its
# output copied into the answer (right); the tool with a wrong operator (wrong); the answer without the
# tool (right only if the model can multiply in its head, which the tiny model cannot).
TOOL_ANSWER_STYLES = ((0.35, "tool"), (0.35, "wrong expression"), (0.3, "no tool"))
# (weight, style) of a take-away game (the model's moves, the game's messages between them): best play
# (leave a multiple of 4), random legal moves, or a move without brackets, which loses at once. The opponent
# plays random legal moves.
TAKE_AWAY_ANSWER_STYLES = ((0.3, "best"), (0.5, "random"), (0.2, "no brackets"))
# (weight, style) of a code-repair episode: right at once; wrong, then fixed after the feedback; wrong
# twice. Only "return" passes; the feedback names the failed calls (REPAIR_PUBLIC_TESTS of them).
REPAIR_ANSWER_STYLES = (
    (0.3, "return"),
    (0.25, "print, then return"),
    (0.25, "wrong name, then return"),
    (0.2, "print, then print"),
)
REPAIR_PUBLIC_TESTS = 2  # the code-repair environment's default public_tests


def worked_solution(problem_text: str, style: str) -> str:
    """The worked arithmetic solution the warm start imitates, ending in one of the ANSWER_STYLES."""
    a, op, b = parse_arithmetic_question(problem_text)
    result = a + b if op == "+" else a - b
    return f"{a} {op} {b} = {result}\n" + style.format(r=result)


def code_answer(task, style: str) -> str:
    """The task's reference solution, or one of the CODE_ANSWER_STYLES of getting it wrong."""
    solution = reference_solution(task)
    if style == "print":
        return re.sub(r"return (.+)", r"print(\1)", solution)
    if style == "wrong name":
        return re.sub(r"def \w+\(", "def solution(", solution)
    return solution


def sums_answer(problem_text: str, style: str) -> str:
    """The worked answer to a scratchpad-sums problem in one of the SUMS_ANSWER_STYLES."""
    start, addends = parse_sum_question(problem_text)
    lines = [] if style == "direct" else scratchpad_lines(start, addends, spaced=style == "spaced")
    return "\n".join([*lines, f"Answer: {start + sum(addends)}"])


def python_call(code: str) -> str:
    """A call of the python tool in the default (Hermes) format."""
    return "<tool_call>\n" + json.dumps({"name": "python", "arguments": {"code": code}}) + "\n</tool_call>"


def tool_answer(problem, style: str) -> list:
    """The turns of a tool-arithmetic episode in one of the TOOL_ANSWER_STYLES: [call, tool message, answer]
    with the tool, [answer] without. The tool message holds what the python tool prints."""
    a, b = parse_product_question(problem.prompt_text)
    if style == "no tool":
        return [f"Answer: {a * b}"]
    expression, value = (f"{a} * {b}", a * b) if style == "tool" else (f"{a} + {b}", a + b)
    return [python_call(expression), {"role": "tool", "content": f"{value}\n"}, f"Answer: {value}"]


def repair_answer(task, style: str) -> list:
    """The turns of a code-repair episode in one of the REPAIR_ANSWER_STYLES: the first attempt (a
    CODE_ANSWER_STYLES answer), and after a failed one the feedback the code-repair environment gives on
    its first REPAIR_PUBLIC_TESTS tests, then the second attempt."""
    first, _, second = style.partition(", then ")
    attempts = [code_answer(task, first)]
    if second:
        attempts += [{"role": "user", "content": repair_feedback(task, first)}, code_answer(task, second)]
    return attempts


def repair_feedback(task, style: str) -> str:
    """What the code-repair environment says of an attempt in a failing CODE_ANSWER_STYLES style: a print
    returns None, a misnamed function is not found."""
    calls = [test[0] for test in task.calls[:REPAIR_PUBLIC_TESTS]]
    if style == "print":
        reports = [CaseReport(call_text(c), "wrong answer", "None", short_repr(c.expected)) for c in calls]
    else:
        got = f"runtime error: the program defines no {calls[0].fn_name}"
        reports = [CaseReport(call_text(c), "runtime error", got, short_repr(c.expected)) for c in calls]
    return feedback_text(reports[0].outcome, reports)


@dataclass(frozen=True)
class TakeAwayOpening:
    """A take-away game as one seat first sees it: the opening message, after the opponent's first move at seat 1
    (drawn from the game's seed, as the rest of its moves in `take_away_answer`)."""

    seed: int
    seat: int
    messages: tuple[dict, ...]


def take_away_openings(seeds: range) -> list[TakeAwayOpening]:
    """The opening of each game of `seeds` at each seat."""
    return [TakeAwayOpening(seed, seat, _take_away_game(seed, seat)[2]) for seed in seeds for seat in SEATS]


def take_away_answer(opening: TakeAwayOpening, style: str) -> list:
    """The seat's turns of the game in one of TAKE_AWAY_ANSWER_STYLES against random legal moves, with the
    game's messages between them; the game's end ends them."""
    game, rng, _ = _take_away_game(opening.seed, opening.seat)
    seat, turns = opening.seat, []
    while True:
        legal = game.legal_moves(seat)
        move = {"best": game.heuristic_move(seat), "random": rng.choice(legal)}.get(style)
        turns.append(move if move is not None else f"I take {rng.choice(legal)[1:-1]}.")
        game.play(seat, turns[-1])
        if game.result is None:
            game.play(1 - seat, rng.choice(game.legal_moves(1 - seat)))
        if game.result is not None:
            return turns
        turns.append({"role": "user", "content": game.messages_for(seat)})


def take_away_best_first_move(opening: TakeAwayOpening, response: str) -> bool:
    """The response's move is best play at the opening (`TakeAway.heuristic_move`)."""
    game, _, _ = _take_away_game(opening.seed, opening.seat)
    return parse_move(response) == parse_move(game.heuristic_move(opening.seat))


def _take_away_game(seed: int, seat: int) -> tuple[TakeAway, random.Random, tuple[dict, ...]]:
    """A game of `seed`, the random generator of the opponent's moves, and the seat's opening (at seat 1, after
    the opponent's first move)."""
    game, rng = TakeAway(seed), random.Random(seed)
    if seat == 1:
        game.play(0, rng.choice(game.legal_moves(0)))
    return game, rng, ({"role": "user", "content": game.messages_for(seat)},)


def answer_text(answer: str | list) -> str:
    """The text of an imitated answer: its turns' and messages' text."""
    if isinstance(answer, str):
        return answer
    return "\n".join(turn if isinstance(turn, str) else turn["content"] for turn in answer)
