"""Tests for dapo_rllib.tasks.rewards.scoring_process (scoring in a killable child process).

Each child start costs a few seconds (``import dapo_rllib`` imports Ray), so the tests
share one ScoringProcess and only the tests about restarts make it start new children.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from dapo_rllib.tasks.rewards import load_scorer
from dapo_rllib.tasks.rewards.scoring_process import TIMED_OUT, ScoreOutcome, ScoringProcess, shared_scoring_process
from dapo_rllib.tasks.rewards.text import as_text
from tests.support import naive_scorers

# Ample for the well-behaved scorers, even on a busy 2-core machine.
TIMEOUT_S = 2.0
# For the scorer that hangs: each test that uses it waits this long.
HANG_TIMEOUT_S = 1.0
# Input on which naive_scorers.catastrophic_regex backtracks for ages.
CATASTROPHIC_INPUT = "1" * 40 + "x"


def spec_of(function) -> str:
    return f"{function.__module__}:{function.__name__}"


@pytest.fixture(scope="module")
def scoring():
    with ScoringProcess() as process:
        yield process


def child_pid(scoring: ScoringProcess) -> int:
    return int(scoring.score(spec_of(naive_scorers.process_id), "", "", TIMEOUT_S).pred)


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_results_equal_in_process_scoring(scoring):
    cases = [
        ("Answer: 540", "540"),
        ("Answer: 540.", "540"),
        ("So \\boxed{2\\sqrt{3}}", "\\sqrt{12}"),
        ("Answer: \\frac{1}{2}", "0.5"),
        ("Answer: 17", "540"),
        ("no answer at all", "540"),
    ]
    outcomes = []
    for scorer in ("math_dapo", "math_verify"):
        for response, ground_truth in cases:
            expected = ScoreOutcome.from_result(scorer, load_scorer(scorer)(response, ground_truth))
            outcome = scoring.score(scorer, response, ground_truth, TIMEOUT_S)
            assert outcome == expected
            outcomes.append(outcome)
    # The cases cover right and wrong answers, and a missing one.
    assert {o.acc for o in outcomes} == {True, False}
    assert None in {o.pred for o in outcomes} and not any(o.timed_out for o in outcomes)


def test_threads_share_one_child_safely(scoring):
    def score(n: int) -> ScoreOutcome:
        return scoring.score("math_dapo", f"Answer: {n}", str(n if n % 3 else n + 1), TIMEOUT_S)

    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(pool.map(score, range(60)))
    # Each reply went to the thread that asked: its pred is its own number.
    assert [o.pred for o in outcomes] == [str(n) for n in range(60)]
    assert [o.acc for o in outcomes] == [n % 3 != 0 for n in range(60)]


def test_a_child_first_used_from_a_thread_that_then_exits_keeps_serving():
    # The kernel's death signal follows the thread that started the child; env runners score from a short-lived
    # thread per call (rollout.env_calls), so a child started there would die with it, call after call.
    with ScoringProcess() as scoring:
        started_in_thread = []
        thread = threading.Thread(target=lambda: started_in_thread.append(child_pid(scoring)))
        thread.start()
        thread.join()
        time.sleep(0.2)  # the death signal, if it came, is delivered by now
        assert process_exists(started_in_thread[0])
        assert child_pid(scoring) == started_in_thread[0]


def test_hanging_scorer_is_killed_counted_wrong_and_the_next_call_works(scoring):
    hung_pid = child_pid(scoring)
    start = time.monotonic()
    outcome = scoring.score(spec_of(naive_scorers.catastrophic_regex), CATASTROPHIC_INPUT, "", HANG_TIMEOUT_S)
    elapsed = time.monotonic() - start

    assert outcome == ScoreOutcome(score=-1.0, acc=False, pred=None, timed_out=True) == TIMED_OUT
    assert HANG_TIMEOUT_S <= elapsed < HANG_TIMEOUT_S + 2.0  # not the ages the regex needs
    assert not process_exists(hung_pid)  # killed and reaped, no zombie left

    assert child_pid(scoring) != hung_pid  # a fresh child
    harmless = scoring.score(spec_of(naive_scorers.catastrophic_regex), "123", "", TIMEOUT_S)
    assert harmless == ScoreOutcome(score=1.0, acc=True, pred="123", timed_out=False)


def test_scorer_error_surfaces_with_its_type_and_message(scoring):
    pid = child_pid(scoring)
    with pytest.raises(RuntimeError, match=r"naive_scorers:raise_error' raised ZeroDivisionError: cannot score 'x'"):
        scoring.score(spec_of(naive_scorers.raise_error), "x", "", TIMEOUT_S)
    with pytest.raises(RuntimeError, match=r"missing_keys' raised TypeError: .*\{'score': 1.0\}.*'acc'"):
        scoring.score(spec_of(naive_scorers.missing_keys), "x", "", TIMEOUT_S)
    with pytest.raises(RuntimeError, match=r"loading scorer 'math_dapp' raised ValueError: unknown scorer"):
        scoring.score("math_dapp", "x", "", TIMEOUT_S)
    assert child_pid(scoring) == pid  # errors do not cost a restart


def test_child_killed_from_outside_is_replaced(scoring):
    pid = child_pid(scoring)
    os.kill(pid, signal.SIGKILL)
    assert scoring.score("math_dapo", "Answer: 5", "5", TIMEOUT_S).acc is True
    assert child_pid(scoring) != pid


def test_child_that_dies_on_a_request_twice_is_an_error(scoring):
    with pytest.raises(RuntimeError, match=r"died twice.*exit_process.*exited with status 3"):
        scoring.score(spec_of(naive_scorers.exit_process), "x", "", TIMEOUT_S)
    assert scoring.score("math_dapo", "Answer: 5", "5", TIMEOUT_S).acc is True


@pytest.mark.parametrize("scorer", ["math_dapo", "math_verify"])
def test_five_megabyte_response_is_scored_within_the_timeout(scoring, scorer):
    scoring.score(scorer, "", "7", TIMEOUT_S)  # scorer module loaded: time only the scoring
    response = "We add 1+2 and keep going. " * 200_000 + "\nAnswer: 7"
    assert len(response) > 5_000_000
    start = time.monotonic()
    outcome = scoring.score(scorer, response, "7", TIMEOUT_S)
    elapsed = time.monotonic() - start
    assert outcome == ScoreOutcome(score=1.0, acc=True, pred="7", timed_out=False)
    assert elapsed < TIMEOUT_S / 2


def test_invalid_utf8_and_lone_surrogates_score_without_crashing(scoring):
    invalid_bytes = b"\xff\xfe truncated \xe2\x82 and a lone surrogate \xed\xa0\x80\nAnswer: 7"
    surrogates = "a pair \ud83d\ude00 and a lone one \ud800 here\nAnswer: 7"
    for text in (as_text(invalid_bytes), as_text(surrogates)):
        assert "\ufffd" in text and text.endswith("\nAnswer: 7")
        text.encode("utf-8")  # raises on a surrogate that is left
        for scorer in ("math_dapo", "math_verify"):
            assert scoring.score(scorer, text, "7", TIMEOUT_S) == ScoreOutcome(1.0, True, "7")


def test_as_text():
    assert as_text("plain \u00e9 text") == "plain \u00e9 text"
    assert as_text("caf\u00e9".encode()) == "caf\u00e9"
    assert as_text(b"a\xffb") == "a\ufffdb"
    # A surrogate pair becomes the character it encodes; a lone surrogate becomes U+FFFD.
    assert as_text("\ud83d\ude00 \udc80") == "\U0001f600 \ufffd"
    with pytest.raises(TypeError, match="int"):
        as_text(42)


def test_close_ends_the_child_and_scoring_again_restarts_it(scoring):
    pid = child_pid(scoring)
    scoring.close()
    assert not process_exists(pid)
    assert child_pid(scoring) != pid


@pytest.mark.parametrize("timeout_s", [0, -1.0, float("nan"), float("inf"), True, "1"])
def test_bad_timeout(scoring, timeout_s):
    with pytest.raises(ValueError, match="timeout_s"):
        scoring.score("math_dapo", "Answer: 1", "1", timeout_s)


def test_bad_text_arguments(scoring):
    with pytest.raises(TypeError, match="response must be a str, got bytes"):
        scoring.score("math_dapo", b"Answer: 1", "1", TIMEOUT_S)
    with pytest.raises(TypeError, match="ground_truth must be a str, got int"):
        scoring.score("math_dapo", "Answer: 1", 1, TIMEOUT_S)


def test_shared_instance_is_one_per_process():
    assert isinstance(shared_scoring_process(), ScoringProcess)
    assert shared_scoring_process() is shared_scoring_process()
