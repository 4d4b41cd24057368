"""Weight sync buckets: planning, joining split parameters, and the object-store transport."""

import math

import pytest
import torch

from dapo_rllib.rollout.weight_sync import BucketAssembler, ObjectStoreTransport, Piece, bucket_tensors, plan_buckets

PARAMS = {
    "embed": torch.arange(40 * 8, dtype=torch.float32).reshape(40, 8),  # 1280 bytes
    "q": torch.randn(8, 8),  # 256 bytes
    "k": torch.randn(2, 8),  # 64 bytes
    "norm": torch.randn(8),  # 32 bytes
}


def plan(bucket_bytes, params=PARAMS):
    return plan_buckets(((n, tuple(p.shape), p.element_size()) for n, p in params.items()), bucket_bytes)


def bucket_bytes_of(bucket):
    return sum(math.prod(p.shape[1:]) * (p.stop - p.start) * 4 for p in bucket)


def test_parameters_that_fit_are_packed_whole_in_order():
    buckets = plan(2048)
    assert [[p.name for p in b] for b in buckets] == [["embed", "q", "k", "norm"]]
    assert all(p.whole for p in buckets[0])


def test_buckets_never_exceed_their_size_and_cover_every_row_once():
    for size in (64, 100, 300, 512, 1300):
        buckets = plan(size)
        assert all(bucket_bytes_of(b) <= size for b in buckets), size
        rows = {name: [] for name in PARAMS}
        for b in buckets:
            for p in b:
                rows[p.name].extend(range(p.start, p.stop))
        assert {n: sorted(r) for n, r in rows.items()} == {n: list(range(t.shape[0])) for n, t in PARAMS.items()}, size


def test_a_parameter_larger_than_the_bucket_is_cut_into_row_slices_of_its_own():
    buckets = plan(300)  # the embedding (1280 bytes, rows of 32) in slices of 9 rows
    embed = [b for b in buckets if b[0].name == "embed"]
    assert [(p.start, p.stop) for (p,) in embed] == [(0, 9), (9, 18), (18, 27), (27, 36), (36, 40)]
    assert [p.name for b in buckets[len(embed) :] for p in b] == ["q", "k", "norm"]


def test_a_row_larger_than_the_bucket_is_refused_naming_the_parameter():
    with pytest.raises(ValueError, match=r"'embed' \[40, 8\] has rows of .* raise weight_sync_bucket_mb"):
        plan(16)
    with pytest.raises(ValueError, match="must be positive"):
        plan(0)


@pytest.mark.parametrize("size", [64, 300, 2048])
def test_assembler_returns_each_parameter_whole_and_equal(size):
    assembler = BucketAssembler()
    received = {}
    # The transport may hand slices over in any order within the stream.
    for bucket in reversed(plan(size)):
        for name, tensor in assembler.add(bucket_tensors(bucket, PARAMS)):
            assert name not in received
            received[name] = tensor
    assert assembler.incomplete() == []
    assert set(received) == set(PARAMS)
    for name, value in PARAMS.items():
        torch.testing.assert_close(received[name], value, rtol=0, atol=0)


def test_assembler_reports_parameters_still_missing_slices_and_rejects_wrong_shapes():
    assembler = BucketAssembler()
    first = plan(300)[0]
    assert assembler.add(bucket_tensors(first, PARAMS)) == []
    assert assembler.incomplete() == ["embed"]
    piece = Piece("q", (8, 8), 0, 8)
    with pytest.raises(ValueError, match="arrived with shape"):
        BucketAssembler().add({piece: torch.zeros(4, 8)})


def test_the_object_store_transport_sends_a_copy_training_cannot_change(ray_session):
    params = {"w": torch.ones(4, 2)}
    (bucket,) = plan_buckets([("w", (4, 2), 4)], 1024)
    transport = ObjectStoreTransport()
    handle = transport.send(bucket_tensors(bucket, params))
    params["w"].mul_(3)  # the next optimizer step
    assert torch.equal(next(iter(transport.receive(handle).values())), torch.ones(4, 2))


def test_object_store_transport_round_trip(ray_session):
    transport = ObjectStoreTransport()
    bucket = plan(300)[-1]
    received = transport.receive(transport.send(bucket_tensors(bucket, PARAMS)))
    assert list(received) == bucket
    for piece, tensor in received.items():
        torch.testing.assert_close(tensor, PARAMS[piece.name][piece.start : piece.stop], rtol=0, atol=0)


def test_bfloat16_weights_travel_bit_for_bit(ray_session):
    # numpy has no bfloat16 (the merged weights of a bfloat16 LoRA base, DeepSpeed's bf16 mode).
    params = {"w": torch.tensor([[1.0, -2.5], [3.140625, 1e-3]], dtype=torch.bfloat16)}
    (bucket,) = plan_buckets([("w", (2, 2), 2)], 1024)
    transport = ObjectStoreTransport()
    (received,) = transport.receive(transport.send(bucket_tensors(bucket, params))).values()
    assert received.dtype == torch.bfloat16 and torch.equal(received, params["w"])
