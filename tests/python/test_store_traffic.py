"""How much a hier group asks of the c10d store as it starts: every request of every rank is counted by a
store of the test's own between hier and a real TCPStore, at 4, 8, 16 and 32 ranks on simulated hosts of 2
ranks (HIER_HOST_ID). The ranks make the group and run collectives that reach every other rank (all-to-all
included), so every rank needs every rank's host and address. Reading them from the store would take N
requests per rank, N^2 at the store's one server; hier exchanges them over UCX in log N steps and reads
the store only for the partners of those steps."""

import collections
import datetime
import re
import statistics

import torch
import torch.distributed as dist

from harness import free_port, run_job

SIZES = (4, 8, 16, 32)
RANKS_PER_HOST = 2


class CountingStore(dist.Store):
    """A store that counts the requests it passes on to `inner`, by kind, and by kind and key with its
    numbers left out."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.count = collections.Counter()
        self.by_key = collections.Counter()

    def _note(self, kind, keys):
        self.count[kind] += 1
        self.by_key[kind + " " + re.sub(r"\d+", "#", ",".join(keys))] += 1

    def set(self, key, value):
        self._note("set", [key])
        self.inner.set(key, value)

    def get(self, key):
        self._note("get", [key])
        return self.inner.get(key)

    def add(self, key, value):
        self._note("add", [key])
        return self.inner.add(key, value)

    def compare_set(self, key, expected, desired):
        self._note("compare_set", [key])
        return self.inner.compare_set(key, expected, desired)

    def check(self, keys):
        self._note("check", keys)
        return self.inner.check(keys)

    def wait(self, keys, timeout=None):
        self._note("wait", keys)
        return self.inner.wait(keys) if timeout is None else self.inner.wait(keys, timeout)

    def delete_key(self, key):
        self._note("delete_key", [key])
        return self.inner.delete_key(key)

    def num_keys(self):
        self._note("num_keys", [])
        return self.inner.num_keys()


def case_count_store_requests(port):
    """Makes a hier group over a counting store (the harness's gloo group only carries the port) and
    returns this rank's requests to it: made, and after collectives that reach every rank."""
    import os

    rank, size = dist.get_rank(), dist.get_world_size()
    dist.destroy_process_group()
    os.environ["HIER_HOST_ID"] = f"host-{rank // RANKS_PER_HOST}"
    inner = dist.TCPStore("127.0.0.1", port, size, is_master=rank == 0, timeout=datetime.timedelta(seconds=60))
    store = CountingStore(inner)
    dist.init_process_group("hier", store=store, rank=rank, world_size=size, timeout=datetime.timedelta(seconds=60))
    made = sum(store.count.values())
    x = torch.full((size * 4,), float(rank + 1))
    dist.all_reduce(x)
    assert x[0].item() == size * (size + 1) / 2
    out = torch.empty(size * 4)
    dist.all_to_all_single(out, torch.full((size * 4,), float(rank)))
    assert out.view(size, 4)[:, 0].tolist() == [float(r) for r in range(size)]
    gathered = torch.empty(size * 2)
    dist.all_gather_into_tensor(gathered, torch.full((2,), float(rank)))
    assert gathered[::2].tolist() == [float(r) for r in range(size)]
    dist.barrier()
    used = dict(store.count)
    dist.destroy_process_group()
    return made, used, dict(store.by_key)


def test_store_requests_per_rank_grow_like_log_n_not_n():
    per_size = {}
    for size in SIZES:
        port = free_port()
        results = run_job(size, case_count_store_requests, port, backend="gloo", timeout_s=120)
        per_size[size] = [sum(used.values()) for _, used, _ in results]
        print(f"{size} ranks: store requests per rank, made {min(r[0] for r in results)}-"
              f"{max(r[0] for r in results)}, after the collectives {min(per_size[size])}-{max(per_size[size])}; "
              f"rank 1's by kind: {results[1][1]}")
        if size == SIZES[-1]:
            print("rank 1's requests by key:", results[1][2])
    # The median rank: a rank that started late polls the store for its first partners a few times more.
    typical = {size: statistics.median(counts) for size, counts in per_size.items()}
    # Reading every rank's keys adds 2 or more requests per rank added, 16, 32 and 64 at the doublings
    # here; log N adds about the same few at every doubling.
    increments = [typical[b] - typical[a] for a, b in zip(SIZES, SIZES[1:])]
    assert increments[-1] <= 2 * max(increments[0], 1) + 8, (typical, increments)
    assert typical[32] < 2 * 32, typical
