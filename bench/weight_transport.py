"""How fast parameter buckets move from a learner actor to an env-runner actor (a benchmark).

    python bench/weight_transport.py [--sizes 64 256 512] [--total-gb 2] [--repeats 3]
                                     [--in-flight 2] [--transports ...] [--json PATH] [--smoke]

Two Ray actors on this machine: a "learner" holding `--total-gb` of float32 parameters (tensors of
`--tensor-mb` each, random values) and an "engine" (the env runner) holding preallocated tensors of
the same names and shapes, as an inference engine does. One measurement is one weight sync: all
the parameters move once, in buckets of `--sizes` MB, at most `--in-flight` buckets in flight:

    object_store_numpy  the learner `ray.put`s a bucket (dict name -> numpy view of the tensor) and
                        calls the engine with its ref; the engine `ray.get`s it (zero-copy from the
                        object store) and copies each array into its preallocated tensor
    object_store_torch  the same with dict name -> torch tensor (Ray pickles a torch tensor through
                        torch's own storage reduction: more copies)
    object_store_torch_zero_copy
                        the same with RAY_ENABLE_ZERO_COPY_TORCH_TENSORS=1 in both actors (Ray's
                        opt-in zero-copy reducer for CPU tensors)
    gloo_broadcast      a two-rank gloo group built without the default process group (TCPStore +
                        ProcessGroupGloo over 127.0.0.1; each actor also has its own one-rank
                        default group, as vLLM and DeepSpeed processes do): the learner packs a
                        bucket into a flat buffer and broadcasts it, the engine receives into a flat
                        buffer and copies out into its tensors; both keep their `--in-flight`
                        buffers between syncs (allocated in the first)

The object store (3 x `--in-flight` x the largest bucket, at least 1 GiB) is preallocated, as a
long job's is resident after its first syncs. Each transport gets fresh actors, and per bucket
size (a row) one first sync and `--repeats` more:

    gb_per_s            parameters' bytes / (the learner starts sending -> the engine has the last
                        bucket copied into its tensors), both ends reading the same CLOCK_MONOTONIC;
                        median (min, max) over the repeats
    extra_rss_mb        per actor, the most a sync raised its RSS above its value before the sync
                        (VmHWM after `echo 5 > /proc/self/clear_refs`, minus VmRSS), over the repeats
    first_*             the same of the row's first sync, which also allocates the gloo buffers
                        (each row its own) and first touches object-store pages. Object-store pages
                        a process has mapped and touched count in its RSS (the same shared pages in
                        both actors) until it exits, so for the object store the first row of a
                        transport (the smallest buckets) shows the whole footprint
    memcpy_gb_per_s     reference: one bucket copied tensor by tensor inside one process

Every sync checks the data: the engine's tensors are zeroed before it, and after it each tensor's
exact checksum (the sum of its bytes read as int64s) must equal the learner's, or the benchmark
fails. The machine's load average is recorded: other jobs on its cores slow every transport.
A full run writes bench/results/weight_transport.json unless `--json` says where; `--smoke` (CI)
moves 64 MB in 16 MB buckets, one sync per transport, and writes only with `--json`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import time
import warnings
from pathlib import Path

import numpy as np
import ray
import torch

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "weight_transport.json"
TRANSPORTS = ("object_store_numpy", "object_store_torch", "gloo_broadcast", "object_store_torch_zero_copy")
MB = 2**20
FLOAT32_BYTES = 4


def now() -> float:
    """System-wide monotonic clock: comparable between the two actors on this machine."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def rss_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


class PeakRSS:
    """Extra resident memory of this process from `start()` to `extra_mb()`."""

    def start(self) -> None:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM := VmRSS
        self.before_kb = rss_kb("VmRSS")

    def extra_mb(self) -> float:
        return (rss_kb("VmHWM") - self.before_kb) / 1024


def checksums(tensors: dict[str, torch.Tensor]) -> dict[str, int]:
    """Exact per-tensor checksum: the sum of the tensor's bytes read as int64 (wrapping; in any order)."""
    return {name: int(t.view(torch.int64).sum()) for name, t in tensors.items()}


def buckets_of(names: list[str], tensors_per_bucket: int) -> list[list[str]]:
    return [names[i : i + tensors_per_bucket] for i in range(0, len(names), tensors_per_bucket)]


def setup_process() -> None:
    """A one-rank default group, as a vLLM or DeepSpeed process has: the transfer group must not need it."""
    import torch.distributed as dist

    warnings.filterwarnings("ignore", message="Zero-copy tensor serialization is enabled")
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


def new_gloo_group(store, rank: int):
    from torch.distributed import ProcessGroupGloo

    options = ProcessGroupGloo._Options()
    options._devices = [ProcessGroupGloo.create_device(hostname="127.0.0.1")]
    options._timeout = datetime.timedelta(seconds=300)
    return ProcessGroupGloo(store, rank, 2, options)


@ray.remote(num_cpus=1)
class Learner:
    """Holds the parameters; sends them."""

    def __init__(self, layout: dict[str, int], seed: int = 0):
        setup_process()
        # Random values, distinct per tensor (a misplaced tensor fails the checksums), made fast.
        base = torch.randn(max(layout.values()), generator=torch.Generator().manual_seed(seed))
        self.params = {name: base[:numel] + i for i, (name, numel) in enumerate(layout.items())}
        self.rss = PeakRSS()
        self.buffers = None

    def checksums(self) -> dict[str, int]:
        return checksums(self.params)

    def memcpy_gb_per_s(self, tensors_per_bucket: int, repeats: int = 5) -> float:
        names = buckets_of(list(self.params), tensors_per_bucket)[0]
        # One flat allocation: it goes back to the system when freed, whereas many tensor-sized
        # ones could stay in the heap and serve (hide) a later row's buffers.
        dst = torch.empty(sum(self.params[n].numel() for n in names))
        best = float("inf")
        for _ in range(repeats):
            start = now()
            offset = 0
            for n in names:
                dst[offset : offset + self.params[n].numel()].copy_(self.params[n])
                offset += self.params[n].numel()
            best = min(best, now() - start)
        return dst.nbytes / best / 1e9

    def release_buffers(self) -> None:
        self.buffers = None

    # The gloo group: the learner is rank 0 and hosts the store.
    def open_store(self) -> int:
        import torch.distributed as dist

        self.store = dist.TCPStore(
            "127.0.0.1", 0, 2, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=120)
        )
        return self.store.port

    def join_group(self) -> None:
        self.pg = new_gloo_group(self.store, rank=0)

    def send_object_store(self, engine, tensors_per_bucket: int, kind: str, in_flight: int) -> dict:
        self.rss.start()
        start = now()
        pending = []
        for names in buckets_of(list(self.params), tensors_per_bucket):
            if len(pending) == in_flight:
                ray.get(pending.pop(0))
            bucket = {n: self.params[n].numpy() if kind == "numpy" else self.params[n] for n in names}
            ref = ray.put(bucket)
            pending.append(engine.load_from_object_store.remote([ref]))  # in a list: the engine `ray.get`s it
            del ref, bucket
        ray.get(pending)
        return {"start": start, "extra_rss_mb": self.rss.extra_mb()}

    def send_gloo(self, tensors_per_bucket: int, in_flight: int) -> dict:
        self.rss.start()
        start = now()
        buckets = buckets_of(list(self.params), tensors_per_bucket)
        if self.buffers is None:
            numel = sum(self.params[n].numel() for n in buckets[0])
            self.buffers = [torch.empty(numel) for _ in range(min(in_flight, len(buckets)))]
        buffers = self.buffers
        works = [None] * len(buffers)
        for i, names in enumerate(buckets):
            slot = i % len(buffers)
            if works[slot] is not None:
                works[slot].wait()
            offset = 0
            for n in names:
                t = self.params[n]
                buffers[slot][offset : offset + t.numel()].copy_(t)
                offset += t.numel()
            works[slot] = self.pg.broadcast(buffers[slot][:offset], 0)
        for work in works:
            if work is not None:
                work.wait()
        return {"start": start, "extra_rss_mb": self.rss.extra_mb()}


@ray.remote(num_cpus=1)
class Engine:
    """Holds preallocated tensors (as an inference engine does); loads buckets into them."""

    def __init__(self, layout: dict[str, int]):
        setup_process()
        self.tensors = {name: torch.zeros(numel) for name, numel in layout.items()}
        self.rss = PeakRSS()
        self.buffers = None

    def join_group(self, port: int) -> None:
        import torch.distributed as dist

        store = dist.TCPStore("127.0.0.1", port, 2, is_master=False, timeout=datetime.timedelta(seconds=120))
        self.pg = new_gloo_group(store, rank=1)

    def release_buffers(self) -> None:
        self.buffers = None

    def begin(self) -> None:
        for t in self.tensors.values():
            t.zero_()  # in place, RSS unchanged: a transport that moves nothing fails the checksums
        self.rss.start()
        self.done = None

    def end(self) -> dict:
        return {"done": self.done, "extra_rss_mb": self.rss.extra_mb(), "checksums": checksums(self.tensors)}

    def load_from_object_store(self, refs: list) -> None:
        bucket = ray.get(refs[0])
        for name, value in bucket.items():
            target = self.tensors[name]
            if isinstance(value, np.ndarray):
                np.copyto(target.numpy(), value)  # the array is a read-only view of the object store
            else:
                target.copy_(value)
        del bucket
        self.done = now()

    def receive_gloo(self, buckets: list[list[str]], in_flight: int) -> None:
        if self.buffers is None:
            numel = sum(self.tensors[n].numel() for n in buckets[0])
            self.buffers = [torch.empty(numel) for _ in range(min(in_flight, len(buckets)))]
        buffers = self.buffers

        def post(i: int):
            size = sum(self.tensors[n].numel() for n in buckets[i])
            return self.pg.broadcast(buffers[i % len(buffers)][:size], 0)

        works = [post(i) for i in range(len(buffers))]
        for i, names in enumerate(buckets):
            slot = i % len(buffers)
            works[slot].wait()
            offset = 0
            for n in names:
                t = self.tensors[n]
                t.copy_(buffers[slot][offset : offset + t.numel()])
                offset += t.numel()
            if i + len(buffers) < len(buckets):
                works[slot] = post(i + len(buffers))
        self.done = now()


def sync_once(
    transport: str,
    learner,
    engine,
    buckets: list[list[str]],
    in_flight: int,
    total_bytes: int,
    expected: dict[str, int],
) -> dict:
    """One weight sync, checked: returns its rate and each actor's extra RSS."""
    ray.get(engine.begin.remote())
    if transport == "gloo_broadcast":
        sent, _ = ray.get(
            [learner.send_gloo.remote(len(buckets[0]), in_flight), engine.receive_gloo.remote(buckets, in_flight)]
        )
    else:
        kind = "numpy" if transport == "object_store_numpy" else "torch"
        sent = ray.get(learner.send_object_store.remote(engine, len(buckets[0]), kind, in_flight))
    received = ray.get(engine.end.remote())
    if received["checksums"] != expected:
        wrong = [n for n in expected if received["checksums"].get(n) != expected[n]]
        raise AssertionError(
            f"{transport}: {len(wrong)} of {len(expected)} tensors differ after the sync (first: {wrong[0]})"
        )
    seconds = received["done"] - sent["start"]
    return {
        "seconds": seconds,
        "gb_per_s": total_bytes / seconds / 1e9,
        "extra_rss_mb_learner": sent["extra_rss_mb"],
        "extra_rss_mb_engine": received["extra_rss_mb"],
    }


def actor_pair(zero_copy: bool, args, total_bytes: int) -> dict:
    """A learner and an engine, joined by a gloo group; the learner's checksums."""
    options = {"runtime_env": {"env_vars": {"RAY_ENABLE_ZERO_COPY_TORCH_TENSORS": "1" if zero_copy else "0"}}}
    layout = {
        f"layers.{i}.weight": args.tensor_mb * MB // FLOAT32_BYTES for i in range(total_bytes // (args.tensor_mb * MB))
    }
    learner = Learner.options(**options).remote(layout)
    engine = Engine.options(**options).remote(layout)
    port = ray.get(learner.open_store.remote())
    ray.get([learner.join_group.remote(), engine.join_group.remote(port)])
    return {
        "learner": learner,
        "engine": engine,
        "names": list(layout),
        "expected": ray.get(learner.checksums.remote()),
    }


def measure(transport: str, bucket_mb: int, args, total_bytes: int, pair: dict) -> dict:
    """A first (cold) sync, then `args.repeats` syncs, on the pair's actors."""
    learner, engine, expected = pair["learner"], pair["engine"], pair["expected"]
    ray.get([learner.release_buffers.remote(), engine.release_buffers.remote()])  # each row allocates its own
    buckets = buckets_of(pair["names"], bucket_mb // args.tensor_mb)
    syncs = [
        sync_once(transport, learner, engine, buckets, args.in_flight, total_bytes, expected)
        for _ in range(1 + args.repeats)
    ]
    memcpy = ray.get(learner.memcpy_gb_per_s.remote(len(buckets[0])))
    warm = syncs[1:] or syncs  # --smoke: the one sync
    rates = [s["gb_per_s"] for s in warm]
    row = {
        "transport": transport,
        "bucket_mb": bucket_mb,
        "total_mb": total_bytes // MB,
        "gb_per_s": statistics.median(rates),
        "gb_per_s_min": min(rates),
        "gb_per_s_max": max(rates),
        "first_gb_per_s": syncs[0]["gb_per_s"],
        "extra_rss_mb_learner": max(s["extra_rss_mb_learner"] for s in warm),
        "extra_rss_mb_engine": max(s["extra_rss_mb_engine"] for s in warm),
        "first_extra_rss_mb_learner": syncs[0]["extra_rss_mb_learner"],
        "first_extra_rss_mb_engine": syncs[0]["extra_rss_mb_engine"],
        "memcpy_gb_per_s": memcpy,
        "checksums_ok": True,
        "syncs": syncs,
    }
    print(
        f"[{transport} {bucket_mb} MB] "
        + "  ".join(
            f"{s['gb_per_s']:.2f} GB/s (+{s['extra_rss_mb_learner']:.0f}/+{s['extra_rss_mb_engine']:.0f} MB)"
            for s in syncs
        )
        + f"  load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    return row


def kill(pair: dict | None) -> None:
    if pair is not None:
        ray.kill(pair["learner"])
        ray.kill(pair["engine"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 512], help="bucket sizes, MB")
    parser.add_argument("--total-gb", type=float, default=2.0, help="parameters moved per sync")
    parser.add_argument(
        "--tensor-mb", type=int, default=16, help="size of each parameter tensor (divides every bucket size)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="syncs measured after the first (cold) one")
    parser.add_argument("--in-flight", type=int, default=2, help="buckets in flight at most (every transport)")
    parser.add_argument("--transports", nargs="+", choices=TRANSPORTS, default=list(TRANSPORTS))
    parser.add_argument(
        "--json", type=Path, help="write the figures here (a full run's default: bench/results/weight_transport.json)"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="64 MB in 16 MB buckets, one sync per transport (CI: the benchmark still runs)",
    )
    args = parser.parse_args()
    if args.smoke:
        args.sizes, args.total_gb, args.tensor_mb, args.repeats = [16], 64 / 1024, 4, 0
    for size in args.sizes:
        if size % args.tensor_mb:
            parser.error(f"bucket size {size} MB is not a multiple of --tensor-mb {args.tensor_mb}")
    largest = max(args.sizes) * MB
    total_bytes = int(args.total_gb * 2**30) // largest * largest  # whole buckets of every size
    if total_bytes == 0:
        parser.error("--total-gb is smaller than the largest bucket")

    # A cluster of its own, whatever else runs here. Its object store is preallocated: in a long
    # job the store's pages are resident after the first syncs, and otherwise the transport that
    # runs first would pay for them (a fresh page costs much more than a copy on this machine).
    object_store_bytes = max(2**30, 3 * args.in_flight * largest)
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=object_store_bytes,
        _system_config={"preallocate_plasma_memory": True},
    )
    load_before = os.getloadavg()
    print(
        f"a sync moves {total_bytes / 2**30:.2f} GiB of float32 parameters ({total_bytes // (args.tensor_mb * MB)} tensors of "
        f"{args.tensor_mb} MB), at most {args.in_flight} buckets in flight; first sync + {args.repeats} per row; "
        f"{os.cpu_count()} CPUs, load average {load_before[0]:.1f}",
        flush=True,
    )
    start = time.perf_counter()
    # Fresh actors per transport: one transport's mapped object-store pages stay out of the next
    # one's RSS. The smoke run (it checks that the transports work, in seconds) starts as few as it can.
    results, pair, key = [], None, None
    for transport in args.transports:
        wanted = transport.endswith("zero_copy") if args.smoke else transport
        if pair is None or key != wanted:
            kill(pair)  # the two actors take both CPUs
            pair, key = actor_pair(transport.endswith("zero_copy"), args, total_bytes), wanted
        results += [measure(transport, size, args, total_bytes, pair) for size in args.sizes]
    kill(pair)
    ray.shutdown()
    load_after = os.getloadavg()

    print()
    print(
        f"{'':<29} {'bucket':>6} {'GB/s':>6} {'(min-max)':>11} {'first':>6}   extra RSS MB: learner/engine, first sync"
    )
    for r in sorted(results, key=lambda r: r["bucket_mb"]):
        print(
            f"{r['transport']:<29} {r['bucket_mb']:>3} MB {r['gb_per_s']:>6.2f} {r['gb_per_s_min']:>5.2f}-{r['gb_per_s_max']:<5.2f} {r['first_gb_per_s']:>6.2f}   "
            f"{r['extra_rss_mb_learner']:>5.0f} /{r['extra_rss_mb_engine']:>5.0f}   {r['first_extra_rss_mb_learner']:>5.0f} /{r['first_extra_rss_mb_engine']:>5.0f}"
        )
    print(
        f"reference: memcpy of a bucket inside one process {statistics.median(r['memcpy_gb_per_s'] for r in results):.2f} GB/s"
    )
    syncs = sum(len(r["syncs"]) for r in results)
    print(
        f"checksums: every tensor arrived intact in all {syncs} syncs ({time.perf_counter() - start:.0f} s; load average {load_after[0]:.1f} at the end)"
    )
    best = {t: max((r for r in results if r["transport"] == t), key=lambda r: r["gb_per_s"]) for t in args.transports}
    ranked = sorted(best.values(), key=lambda r: -r["gb_per_s"])
    winner = ranked[0]
    store = [r for r in ranked if r["transport"].startswith("object_store")]
    gloo = [r for r in ranked if r["transport"] == "gloo_broadcast"]
    versus = f"; object store {store[0]['gb_per_s'] / gloo[0]['gb_per_s']:.1f}x gloo" if store and gloo else ""
    print(
        f"conclusion: {winner['transport']} is fastest here, {winner['gb_per_s']:.2f} GB/s with {winner['bucket_mb']} MB buckets"
        + (
            " (" + ", ".join(f"{r['transport']} {r['gb_per_s']:.2f} at {r['bucket_mb']} MB" for r in ranked[1:]) + ")"
            if ranked[1:]
            else ""
        )
        + versus
    )

    path = args.json or (None if args.smoke else DEFAULT_JSON)
    if path:
        setup = {
            "cpus": os.cpu_count(),
            "total_mb": total_bytes // MB,
            "tensor_mb": args.tensor_mb,
            "repeats_after_first": args.repeats,
            "in_flight": args.in_flight,
            "object_store_mb_preallocated": object_store_bytes // MB,
            "load_average_1min_before_after": [load_before[0], load_after[0]],
            "ray": ray.__version__,
            "torch": torch.__version__,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"setup": setup, "results": results}, indent=1))
        print(f"figures written to {path}")


if __name__ == "__main__":
    main()
