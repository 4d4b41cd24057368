"""Loss aggregation: how per-token losses become one number (token-mean and the GRPO / Dr. GRPO modes)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from dapo_rllib.algorithm.core_algos.common import Count, _check_positive, _check_same_shape, _choice

# --------------------------------------------------------------------------
# Loss aggregation (§2.3, Token-Level Policy Gradient Loss).
# One registry; `agg_loss` is the only entry point.
# --------------------------------------------------------------------------


def _mean_over_sequences(per_seq: torch.Tensor, tokens_per_seq: torch.Tensor, num_seqs: Count | None) -> torch.Tensor:
    """``sum(per_seq) / num_seqs``; ``num_seqs`` defaults to the number of
    sequences with at least one unmasked token (the others hold 0 in
    ``per_seq``)."""
    if num_seqs is None:
        num_seqs = (tokens_per_seq > 0).sum().clamp_min(1)
    return per_seq.sum() / num_seqs


def _token_mean(masked_loss, keep, *, num_tokens, num_seqs, loss_scale_factor):
    # DAPO: every token of every response weighs the same, whatever the
    # length of the response it belongs to.
    if num_tokens is None:
        num_tokens = keep.sum().clamp_min(1)
    return masked_loss.sum() / num_tokens


def _seq_mean_token_mean(masked_loss, keep, *, num_tokens, num_seqs, loss_scale_factor):
    # GRPO: 1/G sum_i 1/|o_i| sum_t, so a long response's tokens weigh less.
    tokens_per_seq = keep.sum(dim=-1)
    per_seq = masked_loss.sum(dim=-1) / tokens_per_seq.clamp_min(1)
    return _mean_over_sequences(per_seq, tokens_per_seq, num_seqs)


def _seq_mean_token_sum(masked_loss, keep, *, num_tokens, num_seqs, loss_scale_factor):
    tokens_per_seq = keep.sum(dim=-1)
    return _mean_over_sequences(masked_loss.sum(dim=-1), tokens_per_seq, num_seqs)


def _seq_mean_token_sum_norm(masked_loss, keep, *, num_tokens, num_seqs, loss_scale_factor):
    # Dr. GRPO: replace 1/|o_i| by one constant (the maximum response length)
    # so that no response is re-weighted by its own length. verl sums (rather
    # than averages) the sequences here; that differs by the constant number of
    # sequences, i.e. only in the learning-rate scale.
    if loss_scale_factor is None:
        loss_scale_factor = keep.shape[-1]
    tokens_per_seq = keep.sum(dim=-1)
    per_seq = masked_loss.sum(dim=-1) / loss_scale_factor
    return _mean_over_sequences(per_seq, tokens_per_seq, num_seqs)


_AGG_FNS: dict[str, Callable[..., torch.Tensor]] = {
    "token-mean": _token_mean,
    "seq-mean-token-mean": _seq_mean_token_mean,
    "seq-mean-token-sum": _seq_mean_token_sum,
    "seq-mean-token-sum-norm": _seq_mean_token_sum_norm,
}
LOSS_AGG_MODES: tuple[str, ...] = tuple(_AGG_FNS)


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    *,
    num_tokens: Count | None = None,
    num_seqs: Count | None = None,
    loss_scale_factor: Count | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss to a scalar.

    Modes (verl's names):

    - ``"token-mean"`` (DAPO): ``sum(loss * mask) / num_tokens``.
    - ``"seq-mean-token-mean"`` (GRPO): mean over sequences of each
      sequence's token mean.
    - ``"seq-mean-token-sum"``: mean over sequences of each sequence's token
      sum.
    - ``"seq-mean-token-sum-norm"`` (Dr. GRPO): mean over sequences of
      ``token sum / loss_scale_factor``.

    The denominators default to what this call sees: ``num_tokens`` to the
    number of unmasked tokens, ``num_seqs`` to the number of sequences with at
    least one unmasked token, ``loss_scale_factor`` to ``loss_mask.shape[-1]``
    (pass the maximum response length so it stays constant over training).
    When one mini-batch is split into pieces (gradient accumulation,
    data-parallel learners), pass the whole mini-batch's ``num_tokens`` /
    ``num_seqs`` to every piece and sum the pieces' losses (or gradients): the
    result is then exactly the mini-batch's loss, never a mean of per-piece
    means (docs/design/algorithm.md §8). Where gradients are averaged across learners (as
    DistributedDataParallel does), scale each learner's loss by the number of
    learners to turn that average back into the sum. Overrides a mode does not
    use are ignored.

    Args:
        loss_mat: [batch, time] per-token loss.
        loss_mask: [batch, time], 0/1; count it *after* any masking (e.g. of
            truncated responses), since that is what the loss sums over.
        loss_agg_mode: one of ``LOSS_AGG_MODES``.
        num_tokens, num_seqs, loss_scale_factor: > 0; see above.

    Returns:
        0-dim tensor. Sequences whose mask is all 0 contribute nothing.
    """
    agg_fn = _choice(_AGG_FNS, loss_agg_mode, "loss_agg_mode", "modes")
    _check_same_shape(loss_mat=loss_mat, loss_mask=loss_mask)
    _check_positive("num_tokens", num_tokens)
    _check_positive("num_seqs", num_seqs)
    _check_positive("loss_scale_factor", loss_scale_factor)
    keep = loss_mask.bool()
    return agg_fn(
        loss_mat.masked_fill(~keep, 0),
        keep,
        num_tokens=num_tokens,
        num_seqs=num_seqs,
        loss_scale_factor=loss_scale_factor,
    )
