"""Validation metrics the way the DAPO paper reports them (docs/design/algorithm.md §5, §6), as pure functions.

Every problem is answered n times (the paper: n = 32 at temperature 1.0, top_p 0.7). Per data
source:

    avg@n      mean accuracy over the n samples, averaged over problems (the headline number;
               equal to pass@1)
    pass@k     probability that at least one of k samples drawn without replacement from the n
               is correct, with the unbiased estimator 1 - C(n-c, k) / C(n, k) (c correct of
               n; Chen et al., 2021), averaged over problems; k = 1, 2, 4, ... and n
    maj@n      accuracy of the majority vote over the n extracted answers
    response_length_mean, truncation_ratio (finish reason "length"), scoring_timeouts

Games of two players are validated against fixed opponents, a data source per opponent
(``versus_source``: "<game source>/vs_<opponent>"), where avg@n is the win rate and draw_rate the share
drawn; the game's own source then holds the Elo ratings of the model and its opponents (``versus_ratings``).

No Ray, no engine: lists in, numbers out, so the definitions can be checked by hand.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np

from dapo_rllib.columns import Metrics, Outcome
from dapo_rllib.contracts import ProblemSamples  # the input of `summarize` (an EvalRecord is one)
from dapo_rllib.reporting.elo import elo_ratings

#: Joins a game's data source and an opponent's name into the source of the games against it.
VERSUS = "/vs_"
#: The model's name among its opponents in the Elo ratings.
MODEL_PLAYER = "model"
#: A game's result as a score for the Elo ratings.
OUTCOME_SCORES = {Outcome.WIN: 1.0, Outcome.DRAW: 0.5, Outcome.LOSS: 0.0}


def versus_source(source: str, opponent: str) -> str:
    """The data source of a game's validation against ``opponent``: ``"<source>/vs_<opponent>"``."""
    return f"{source}{VERSUS}{opponent}"


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) as a product of k factors: no huge binomials for n = 32 and beyond.
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def majority_answer(pred: Sequence[str | None]) -> str | None:
    """The most frequent extracted answer (None: no sample has one).

    Samples without an answer do not vote. A tie goes to the answer that appeared first, so the
    result does not depend on hashing or sort order.
    """
    votes = Counter(p for p in pred if p is not None)
    if not votes:
        return None
    top = max(votes.values())
    return next(p for p in pred if p is not None and votes[p] == top)


def majority_correct(pred: Sequence[str | None], acc: Sequence[bool]) -> bool:
    """Whether the majority answer is correct (as scored on its first sample); no answer: wrong."""
    winner = majority_answer(pred)
    return winner is not None and bool(acc[list(pred).index(winner)])


def k_values(n: int) -> list[int]:
    """The k of pass@k: powers of two below n, and n itself."""
    return sorted({2**i for i in range(n.bit_length()) if 2**i < n} | {n})


def summarize(problems: Sequence[ProblemSamples], *, elo_anchor: str | None = None) -> dict[str, dict[str, float]]:
    """The metrics above for each data source, keyed by source then by metric name; a game validated against
    fixed opponents also has its Elo ratings (``versus_ratings``, ``elo_anchor`` at the anchor's rating)."""
    by_source: dict[str, list[ProblemSamples]] = {}
    for problem in problems:
        by_source.setdefault(problem.data_source, []).append(problem)
    summary = {source: _summarize_source(source, group) for source, group in by_source.items()}
    return summary | versus_ratings(problems, elo_anchor)


def versus_ratings(problems: Sequence[ProblemSamples], anchor: str | None = None) -> dict[str, dict[str, float]]:
    """{game source: {"elo": the model's rating, "elo/<opponent>": each opponent's}} from the games of the
    ``versus_source`` sources: the Bradley-Terry Elo ratings of `reporting.elo` (a draw half a win), with
    opponent ``anchor`` at `reporting.elo.ANCHOR_RATING` where it played (else the prior's virtual player is).
    Games whose environment failed have no result and are left out."""
    results: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
    for problem in problems:
        game, versus, opponent = problem.data_source.rpartition(VERSUS)
        if versus and problem.outcomes:
            results[game] += [(MODEL_PLAYER, opponent, OUTCOME_SCORES[o]) for o in problem.outcomes if o]
    ratings = {}
    for game, games in results.items():
        opponents = sorted({opponent for _, opponent, _ in games})
        elo = elo_ratings(games, anchor=anchor if anchor in opponents else None)
        ratings[game] = {Metrics.ELO: elo[MODEL_PLAYER]} | {f"{Metrics.ELO}/{o}": elo[o] for o in opponents}
    return ratings


def _summarize_source(source: str, problems: list[ProblemSamples]) -> dict[str, float]:
    sizes = sorted({p.n for p in problems})
    if len(sizes) != 1:
        raise ValueError(f"data source {source!r} has problems with different sample counts {sizes}; avg@k needs one k")
    (n,) = sizes
    correct = [int(sum(map(bool, p.acc))) for p in problems]
    metrics = {f"{Metrics.AVG_AT}{n}": float(np.mean([c / n for c in correct]))}
    metrics |= {f"{Metrics.PASS_AT}{k}": float(np.mean([pass_at_k(n, c, k) for c in correct])) for k in k_values(n)}
    metrics[f"{Metrics.MAJ_AT}{n}"] = float(np.mean([majority_correct(p.pred, p.acc) for p in problems]))
    metrics |= {
        Metrics.RESPONSE_LENGTH_MEAN: float(np.mean([x for p in problems for x in p.length])),
        Metrics.TRUNCATION_RATIO: float(np.mean([bool(x) for p in problems for x in p.truncated])),
        Metrics.SCORING_TIMEOUTS: sum(bool(x) for p in problems for x in p.timed_out),
        Metrics.NUM_PROBLEMS: len(problems),
        Metrics.NUM_SAMPLES: n * len(problems),
    }
    if broken := sum(bool(p.broken_task) for p in problems):  # code tasks whose tests fail whatever the answer
        metrics[Metrics.BROKEN_TASKS] = broken
    if any(p.invalid_moves for p in problems):  # games: moves the game refused, per episode
        metrics[Metrics.INVALID_MOVES] = float(np.mean([x for p in problems for x in p.invalid_moves or [0] * p.n]))
    if any(p.outcomes for p in problems):  # games of two players: the model's draws (its wins: avg@n)
        metrics[Metrics.DRAW_RATE] = float(np.mean([x == Outcome.DRAW for p in problems for x in p.outcomes]))
    if failed := sum(bool(x) for p in problems for x in p.env_errors):  # episodes whose environment failed
        metrics[Metrics.ENV_ERRORS] = failed
    # Episodes of several turns, or with tools: how many turns, how often a tool, how good the first answer.
    turns = [x for p in problems for x in p.turns]
    tool_calls = [x for p in problems for x in p.tool_calls]
    if max(turns, default=1) > 1 or any(tool_calls):
        metrics[Metrics.TURNS_MEAN] = float(np.mean(turns))
        if any(tool_calls):
            metrics[Metrics.TOOL_USE] = float(np.mean([x > 0 for x in tool_calls]))
        if any(p.first_acc for p in problems):
            firsts = [x for p in problems for x in (p.first_acc or p.acc)]  # a record without: first answer = last
            metrics[Metrics.FIRST_ANSWER_ACC] = float(np.mean([bool(x) for x in firsts]))
    return metrics


def per_source(results: dict) -> dict[str, tuple[int, dict[str, float]]]:
    """{source: (n, metrics)} of the `summarize` entries in `results` (other entries skipped)."""
    found = {}
    for source, metrics in results.items():
        keys = metrics if isinstance(metrics, dict) else ()
        avg = next((key for key in keys if key.startswith(Metrics.AVG_AT)), None)
        if avg is not None:
            found[source] = (int(avg.removeprefix(Metrics.AVG_AT)), metrics)
    return found


def headline_values(results: dict) -> dict[str, float]:
    """{"<source>/avg@n": value} for every data source in `results`."""
    values = {}
    for source, (n, metrics) in per_source(results).items():
        avg = f"{Metrics.AVG_AT}{n}"
        values[f"{source}/{avg}"] = metrics[avg]
    return values


def headline(results: dict) -> str:
    """avg@n, pass@n and maj@n of every data source in `results`, on one line."""
    parts = []
    for source, (n, m) in per_source(results).items():
        names = (f"{Metrics.AVG_AT}{n}", f"{Metrics.PASS_AT}{n}", f"{Metrics.MAJ_AT}{n}")
        values = "  ".join(f"{name} {m[name]:.3f}" for name in names)
        parts.append(f"{source}: {values}  ({m[Metrics.NUM_PROBLEMS]} problems)")
    return "; ".join(parts)
