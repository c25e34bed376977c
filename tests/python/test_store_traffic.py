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
        self.requests = []  # (kind, key) in order

    def _note(self, kind, keys):
        self.count[kind] += 1
        self.by_key[kind + " " + re.sub(r"\d+", "#", ",".join(keys))] += 1
        self.requests.extend((kind, key) for key in keys)

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


# The stores the cases below made: rank 0's serves the others, which may still read it (a lazy endpoint
# for a peer's last message) after rank 0 returned; it goes with the rank's process.
_STORES = []


def case_new_group_learns_from_the_default_group(port, parent):
    """A new group over ranks 1-3 of 4, made after the default group's first collective finished
    (`parent` "done"), while it is in flight (rank 0 issues it late: "in flight") or before any ("none").
    Returns the store requests the new group made, and checks its results, whose order would show a
    wrong mapping of its ranks to the default group's."""
    import time

    rank, size = dist.get_rank(), dist.get_world_size()
    dist.destroy_process_group()
    inner = dist.TCPStore("127.0.0.1", port, size, is_master=rank == 0, timeout=datetime.timedelta(seconds=60))
    _STORES.append(inner)
    store = CountingStore(inner)
    dist.init_process_group("hier", store=store, rank=rank, world_size=size, timeout=datetime.timedelta(seconds=30))
    x = torch.full((3,), float(rank + 1))
    work = None
    if parent != "none":
        if rank == 0 and parent == "in flight":
            time.sleep(0.3)
        work = dist.all_reduce(x, async_op=True)
        if parent == "done":
            work.wait()
    start = len(store.requests)
    group = dist.new_group([1, 2, 3])
    if rank != 0:
        name = dist.distributed_c10d._get_process_group_name(group)
        y = torch.full((2,), float(10 * rank))
        dist.all_reduce(y, group=group)
        assert y.tolist() == [60.0, 60.0], y
        gathered = torch.empty(6)
        dist.all_gather_into_tensor(gathered, torch.full((2,), float(rank)), group=group)
        assert gathered.tolist() == [1.0, 1.0, 2.0, 2.0, 3.0, 3.0], gathered
    if work is not None:
        work.wait()
        assert x.tolist() == [10.0] * 3, x
    dist.barrier()
    made = store.requests[start:]
    dist.destroy_process_group()
    if rank == 0:
        return []
    # The new group's keys carry its name between torch's double slashes (its PrefixStore); the default
    # group's do not.
    return [(kind, key) for kind, key in made if f"//{name}//" in key and "hier/" in key]


def addresses_read(requests):
    return [key for kind, key in requests if kind in ("get", "wait", "check") and "hier/addr/" in key]


def host_probed(requests):
    return [key for _, key in requests if "hier/shm/cma/" in key or "hier/shm/single_copy/" in key]


def test_a_new_group_takes_the_default_groups_records_and_host_facts():
    # The default group's first collective finished on every rank: the new group reads no address from
    # the store (no exchange either: its collectives would reach nobody without the addresses) and takes
    # the host's facts, though it sets up shared memory of its own.
    results = run_job(4, case_new_group_learns_from_the_default_group, free_port(), "done", backend="gloo",
                      timeout_s=120)
    for rank, requests in enumerate(results[1:], 1):
        assert addresses_read(requests) == [], f"rank {rank} read addresses from the store"
        assert host_probed(requests) == [], f"rank {rank} probed the host again: {host_probed(requests)}"
        assert any("hier/shm/mapped/" in key for _, key in requests), requests
    # Made while that collective is still in flight on some ranks: the records all the same (every rank
    # issued it, so every rank learns them), the host's facts as the ranks find them (where they do not
    # all know them yet, they probe, all of them).
    results = run_job(4, case_new_group_learns_from_the_default_group, free_port(), "in flight", backend="gloo",
                      timeout_s=120)
    for rank, requests in enumerate(results[1:], 1):
        assert addresses_read(requests) == [], f"rank {rank} read addresses from the store"
    assert len({bool(host_probed(requests)) for requests in results[1:]}) == 1, results
    # With no collective on the default group before it, the new group finds everything out itself.
    results = run_job(4, case_new_group_learns_from_the_default_group, free_port(), "none", backend="gloo",
                      timeout_s=120)
    for rank, requests in enumerate(results[1:], 1):
        assert host_probed(requests) != [], f"rank {rank}: {requests}"
    assert any(addresses_read(requests) for requests in results[1:]), "no rank of the new group exchanged"


def case_eager_init(port, ranks_per_host):
    """HIER_EAGER_INIT=1 on ranks of simulated hosts: returns the hier keys this rank asked the store for
    in each phase (init, the first collective, new_group, the new group's first collective), checking
    the collectives' results."""
    import os

    rank, size = dist.get_rank(), dist.get_world_size()
    dist.destroy_process_group()
    os.environ["HIER_EAGER_INIT"] = "1"
    os.environ["HIER_HOST_ID"] = f"host-{rank // ranks_per_host}"
    inner = dist.TCPStore("127.0.0.1", port, size, is_master=rank == 0, timeout=datetime.timedelta(seconds=60))
    _STORES.append(inner)
    store = CountingStore(inner)
    phases = {}

    def phase(name, call):
        start = len(store.requests)
        call()
        phases[name] = [f"{kind} {key}" for kind, key in store.requests[start:] if "hier/" in key]

    phase("init", lambda: dist.init_process_group("hier", store=store, rank=rank, world_size=size,
                                                  timeout=datetime.timedelta(seconds=30)))
    x = torch.full((1000,), float(rank + 1))
    phase("first op", lambda: dist.all_reduce(x))
    assert x[0].item() == size * (size + 1) / 2, x
    groups = []
    phase("new_group", lambda: groups.append(dist.new_group(list(range(size)))))
    y = torch.full((1000,), float(rank))
    phase("new group's first op", lambda: dist.all_reduce(y, group=groups[0]))
    assert y[-1].item() == size * (size - 1) / 2, y
    dist.barrier()
    dist.destroy_process_group()
    return phases


def test_eager_init_sets_up_at_creation_what_the_first_operation_would():
    for ranks_per_host in (4, 2):
        results = run_job(4, case_eager_init, free_port(), ranks_per_host, backend="gloo", timeout_s=120)
        for rank, phases in enumerate(results):
            where = f"rank {rank}, {ranks_per_host} ranks a host"
            # Shared memory is set up at init (and the records exchanged, which asks for addresses).
            assert any("hier/shm/mapped/" in r for r in phases["init"]), (where, phases["init"])
            assert any("hier/shm/mapped/" in r for r in phases["new_group"]), (where, phases["new_group"])
            # The new group takes the default group's records and host facts: no addresses, no probe.
            assert not any("hier/addr/" in r and not r.startswith("set") for r in phases["new_group"]), where
            assert host_probed([r.split(" ", 1) for r in phases["new_group"]]) == [], (where, phases["new_group"])
            # The first collectives find everything set up: not one request to the store.
            assert phases["first op"] == [], (where, phases["first op"])
            assert phases["new group's first op"] == [], (where, phases["new group's first op"])


def case_default_group_learns_late():
    """Ranks 1 and 2 issue the default group's first collective and make a group of the two; rank 0 issues
    that collective only after the new group's timeout: the new group's first operation, which waits for
    the default group's records, fails by its deadline, naming why, and the next one succeeds."""
    import time

    rank = dist.get_rank()
    x = torch.ones(4)
    work = None
    if rank != 0:
        work = dist.all_reduce(x, async_op=True)
    group = dist.new_group([1, 2], timeout=datetime.timedelta(seconds=1))
    message = ""
    if rank != 0:
        start = time.monotonic()
        try:
            dist.all_reduce(torch.ones(2), group=group)
        except RuntimeError as e:
            message = str(e).split("\nException raised from")[0]
        took = time.monotonic() - start
        assert message and took < 5, (message, took)
    else:
        time.sleep(2.5)
        work = dist.all_reduce(x, async_op=True)
    work.wait()
    assert x.tolist() == [3.0] * 4, x
    if rank != 0:
        y = torch.full((2,), float(rank))
        dist.all_reduce(y, group=group)
        assert y.tolist() == [3.0, 3.0], y
    dist.barrier()
    return message


def test_a_new_group_waiting_for_the_default_groups_records_fails_by_its_deadline():
    messages = run_job(3, case_default_group_learns_late, timeout_s=60)
    for message in messages[1:]:
        assert "had not learned them by the deadline" in message, message
        assert "has not run its first collective" in message, message
