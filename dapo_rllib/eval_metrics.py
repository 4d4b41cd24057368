"""Validation metrics the way the DAPO paper reports them (DAPO.md §5, §6), as pure functions.

Every problem is answered n times (the paper: n = 32 at temperature 1.0, top_p 0.7). Per data
source:

    avg@n      mean accuracy over the n samples, averaged over problems (the headline number;
               equal to pass@1)
    pass@k     probability that at least one of k samples drawn without replacement from the n
               is correct, with the unbiased estimator 1 - C(n-c, k) / C(n, k) (c correct of
               n; Chen et al., 2021), averaged over problems; k = 1, 2, 4, ... and n
    maj@n      accuracy of the majority vote over the n extracted answers
    response_length_mean, truncation_ratio (finish reason "length"), scoring_timeouts

No Ray, no engine: lists in, numbers out, so the definitions can be checked by hand.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ProblemSamples:
    """The n samples drawn for one problem, scored.

    Attributes:
        data_source: Which data source the problem belongs to (metrics are per source).
        acc: Whether each sample is correct.
        pred: The answer extracted from each sample (None: none found); the majority vote
            counts equal strings as the same answer.
        length: Response length of each sample in tokens.
        truncated: Whether each sample hit the generation limit.
        timed_out: Whether scoring each sample hit the scoring timeout (scored wrong).
    """

    data_source: str
    acc: Sequence[bool]
    pred: Sequence[str | None]
    length: Sequence[int]
    truncated: Sequence[bool]
    timed_out: Sequence[bool]

    def __post_init__(self) -> None:
        sizes = {name: len(getattr(self, name)) for name in ("acc", "pred", "length", "truncated", "timed_out")}
        if len(set(sizes.values())) != 1 or not sizes["acc"]:
            raise ValueError(f"a problem needs the same, non-zero number of values per sample field, got {sizes}")

    @property
    def n(self) -> int:
        return len(self.acc)

    @classmethod
    def from_record(cls, record: dict) -> "ProblemSamples":
        """From a record of `VLLMEnvRunner.evaluate` (extra keys, like the ground truth, ignored)."""
        return cls(**{name: record[name] for name in cls.__dataclass_fields__})


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


def summarize(problems: Sequence[ProblemSamples]) -> dict[str, dict[str, float]]:
    """The metrics above for each data source, keyed by source then by metric name."""
    by_source: dict[str, list[ProblemSamples]] = {}
    for problem in problems:
        by_source.setdefault(problem.data_source, []).append(problem)
    return {source: _summarize_source(source, group) for source, group in by_source.items()}


def _summarize_source(source: str, problems: list[ProblemSamples]) -> dict[str, float]:
    sizes = sorted({p.n for p in problems})
    if len(sizes) != 1:
        raise ValueError(f"data source {source!r} has problems with different sample counts {sizes}; avg@k needs one k")
    (n,) = sizes
    correct = [int(sum(map(bool, p.acc))) for p in problems]
    metrics = {f"avg@{n}": float(np.mean([c / n for c in correct]))}
    metrics |= {f"pass@{k}": float(np.mean([pass_at_k(n, c, k) for c in correct])) for k in k_values(n)}
    metrics[f"maj@{n}"] = float(np.mean([majority_correct(p.pred, p.acc) for p in problems]))
    metrics |= {
        "response_length_mean": float(np.mean([x for p in problems for x in p.length])),
        "truncation_ratio": float(np.mean([bool(x) for p in problems for x in p.truncated])),
        "scoring_timeouts": sum(bool(x) for p in problems for x in p.timed_out),
        "num_problems": len(problems),
        "num_samples": n * len(problems),
    }
    return metrics


def per_source(results: dict) -> dict[str, tuple[int, dict[str, float]]]:
    """{source: (n, metrics)} of the `summarize` entries in `results` (other entries skipped)."""
    found = {}
    for source, metrics in results.items():
        avg = next((key for key in metrics if key.startswith("avg@")), None) if isinstance(metrics, dict) else None
        if avg is not None:
            found[source] = (int(avg.removeprefix("avg@")), metrics)
    return found


def headline_values(results: dict) -> dict[str, float]:
    """{"<source>/avg@n": value} for every data source in `results`."""
    return {f"{source}/avg@{n}": metrics[f"avg@{n}"] for source, (n, metrics) in per_source(results).items()}


def headline(results: dict) -> str:
    """avg@n, pass@n and maj@n of every data source in `results`, on one line."""
    return "; ".join(
        f"{source}: avg@{n} {m[f'avg@{n}']:.3f}  pass@{n} {m[f'pass@{n}']:.3f}  maj@{n} {m[f'maj@{n}']:.3f}  ({m['num_problems']} problems)"
        for source, (n, m) in per_source(results).items()
    )
