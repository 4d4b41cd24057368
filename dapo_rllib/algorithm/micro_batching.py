"""Token-budget micro-batches: how a mini-batch is cut into forward passes that fit in memory.

Pure (torch only, no Ray). A mini-batch arrives padded to its longest prompt and longest
response (the layout of `connectors.PadTokenBatch`: prompts left-padded, responses
right-padded). Sorting sequences by length before cutting keeps each micro-batch's padding
small, and every micro-batch is trimmed to its own widths, so a forward pass costs about the
tokens it holds. A micro-batch costs rows x (its widest prompt + its widest response) tokens,
at most the budget.

Cutting changes no result as long as every micro-batch's loss is divided by the whole
mini-batch's counts (see `core_algos.agg_loss`): the pieces' gradients then sum to the
gradient of the mini-batch in one piece.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

from dapo_rllib.columns import Columns

PROMPT_COLUMNS = (Columns.OBS, Columns.PROMPT_MASK)  # [B, P], left-padded


@dataclass(frozen=True)
class MicroBatch:
    """Rows of a mini-batch and the widths they are trimmed to."""

    rows: torch.Tensor  # indices into the mini-batch
    prompt_width: int
    response_width: int

    @property
    def padded_tokens(self) -> int:
        return len(self.rows) * (self.prompt_width + self.response_width)


def plan_micro_batches(
    prompt_lengths: torch.Tensor, response_lengths: torch.Tensor, max_tokens: int
) -> list[MicroBatch]:
    """Cut sequences into micro-batches of at most `max_tokens` padded tokens each.

    Sequences go longest first; each joins the current micro-batch while the padded size
    (rows x (widest prompt + widest response)) stays within the budget. Longest-first keeps
    similar lengths together, so padding stays small.

    Raises:
        ValueError: a single sequence is longer than `max_tokens`.
    """
    prompt_lengths, response_lengths = prompt_lengths.long().cpu(), response_lengths.long().cpu()
    totals = prompt_lengths + response_lengths
    if len(totals) and int(totals.max()) > max_tokens:
        longest = int(totals.argmax())
        raise ValueError(
            f"max_tokens_per_micro_batch={max_tokens} is smaller than sequence {longest} of the batch "
            f"({int(prompt_lengths[longest])} prompt + {int(response_lengths[longest])} response = "
            f"{int(totals[longest])} tokens); it must hold at least one whole sequence"
        )
    plan: list[MicroBatch] = []
    rows: list[int] = []
    width_p = width_r = 0
    for i in torch.argsort(totals, descending=True, stable=True).tolist():
        p, r = int(prompt_lengths[i]), int(response_lengths[i])
        if rows and (len(rows) + 1) * (max(width_p, p) + max(width_r, r)) > max_tokens:
            plan.append(MicroBatch(torch.tensor(rows), width_p, width_r))
            rows, width_p, width_r = [], 0, 0
        rows.append(i)
        width_p, width_r = max(width_p, p), max(width_r, r)
    if rows:
        plan.append(MicroBatch(torch.tensor(rows), width_p, width_r))
    return plan


def plan_for_batch(batch: Mapping[str, torch.Tensor], max_tokens: int) -> list[MicroBatch]:
    """`plan_micro_batches` for a padded batch, from its prompt and response masks."""
    return plan_micro_batches(batch[Columns.PROMPT_MASK].sum(-1), batch[Columns.RESPONSE_MASK].sum(-1), max_tokens)


def take(batch: Mapping[str, torch.Tensor], micro_batch: MicroBatch) -> dict[str, torch.Tensor]:
    """The micro-batch's rows of every column, prompt columns trimmed from the left and
    response-wide columns from the right (padding only is cut)."""
    response_width = batch[Columns.ACTIONS].shape[1]
    rows = micro_batch.rows.to(batch[Columns.ACTIONS].device)
    out = {}
    for key, column in batch.items():
        if not isinstance(column, torch.Tensor):
            raise TypeError(f"micro-batching needs tensor columns; column {key!r} is {type(column).__name__}")
        column = column[rows]
        if key in PROMPT_COLUMNS:
            column = column[:, column.shape[1] - micro_batch.prompt_width :]
        elif column.dim() >= 2 and column.shape[1] == response_width:
            column = column[:, : micro_batch.response_width]
        out[key] = column
    return out


def padding_fraction(plan: list[MicroBatch], batch: Mapping[str, torch.Tensor]) -> float:
    """Padded positions / all positions over the forward passes of `plan`."""
    real = float(batch[Columns.PROMPT_MASK].sum() + batch[Columns.RESPONSE_MASK].sum())
    total = sum(mb.padded_tokens for mb in plan)
    return 1.0 - real / total if total else 0.0
