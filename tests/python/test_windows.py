"""One-sided windows (dist._new_window, torch 2.14 on) on CPU tensors: puts land where they were aimed and
nowhere else, for every dtype, uneven window sizes and offsets, on 2, 3 and 4 ranks; a signal orders after
the puts before it; signals that come before their wait are kept; a target that never calls into hier
still takes puts; bad calls raise on the caller (or on every rank, for a registration) naming the group
and leave it usable; a wait for a signal that never comes fails within its timeout. Every window's
contents are checked against what this file computes from the puts made."""

import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from harness import TORCH_RELEASE, run_job

pytestmark = pytest.mark.skipif(
    TORCH_RELEASE < (2, 14), reason=f"one-sided windows came with torch 2.14; this is torch {torch.__version__}"
)

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int8, torch.uint8, torch.int16,
          torch.int32, torch.int64, torch.bool, torch.complex64]
CHUNK = 5  # elements each rank puts into each peer's window


def _values(src, dst, dtype, n=CHUNK):
    """What rank `src` puts into rank `dst`'s window: distinct per pair, exact in every dtype."""
    v = torch.arange(n, dtype=torch.int64) + 7 * src + 3 * dst + 1
    if dtype == torch.bool:
        return (v % 2).to(torch.bool)
    if dtype in (torch.int8, torch.uint8):
        v = v % 100
    return v.to(dtype)


def _window_length(rank, world):
    """Uneven: rank r exposes room for every peer's chunk at offset src * CHUNK + src, plus r extra elements."""
    return world * (CHUNK + world) + rank


def case_everyone_puts_into_everyone(dtypes):
    rank, world = dist.get_rank(), dist.get_world_size()
    assert dist._supports_window()
    win = dist._new_window()
    for dtype in dtypes:
        mine = torch.zeros(_window_length(rank, world), dtype=dtype)
        win.tensor_register(mine)
        works = []
        for dst in range(world):
            if dst != rank:
                # Offsets differ by source: src * CHUNK + src, unaligned for every element size.
                works.append(win.put(_values(rank, dst, dtype), dst, rank * CHUNK + rank, True))
        for src in range(world):
            if src != rank:
                win.wait_signal(src, False)  # one per put: the put's own signal
        for w in works:
            w.wait()
        expected = torch.zeros_like(mine)
        for src in range(world):
            if src != rank:
                expected[src * CHUNK + src: src * CHUNK + src + CHUNK] = _values(src, rank, dtype)
        assert torch.equal(mine, expected), (dtype, mine, expected)
        assert torch.equal(win.map_remote_tensor(rank), expected)
        for peer in range(world):
            assert win.get_attr(peer).access_type == torch._C._distributed_c10d.WindowAccessType.SEPARATE
        win.tensor_deregister()
    return rank


@pytest.mark.parametrize("world", [2, 3, 4])
def test_puts_land_where_aimed_for_every_dtype(world):
    dtypes = DTYPES if world == 2 else [torch.float32, torch.bfloat16, torch.int64]
    assert run_job(world, case_everyone_puts_into_everyone, dtypes, timeout_s=180) == list(range(world))


def case_signal_after_puts_and_early_signals():
    rank = dist.get_rank()
    store = dist.distributed_c10d._get_default_store()
    box = torch.zeros(3 * 1000 + 1000, dtype=torch.float32)
    win = dist._new_window(box)
    if rank == 0:
        # Three asynchronous puts and a signal: the signal follows every put to rank 1.
        works = [win.put(torch.full((1000,), float(i + 1)), 1, i * 1000, True) for i in range(3)]
        works.append(win.signal(1, True))
        for w in works:
            w.wait()
        store.set("sent", "1")
        # Large: 4 MiB more, beyond UCX's eager sizes.
        big = torch.arange(1 << 20, dtype=torch.float32)
        win2 = dist._new_window(torch.zeros(1 << 20))
        win2.put(big, 1, 0, False)
        win2.tensor_deregister()
    else:
        # Every signal came before this rank waits: UCX keeps them.
        store.wait(["sent"], timedelta(seconds=30))
        time.sleep(0.2)
        for _ in range(4):
            win.wait_signal(0, False)
        expected = torch.cat([torch.full((1000,), float(i + 1)) for i in range(3)] + [torch.zeros(1000)])
        assert torch.equal(box, expected)
        mine = torch.zeros(1 << 20)
        win2 = dist._new_window(mine)
        win2.wait_signal(0, False)
        assert torch.equal(mine, torch.arange(1 << 20, dtype=torch.float32))
        win2.tensor_deregister()
    win.tensor_deregister()
    return rank


def test_a_signal_follows_the_puts_before_it_and_early_signals_are_kept():
    assert run_job(2, case_signal_after_puts_and_early_signals, timeout_s=120) == [0, 1]


def case_target_never_calls_in():
    """The last rank (on another host, where there are several) registers, then waits in the store alone
    (no hier call) while rank 0's puts must land in its window."""
    rank, world = dist.get_rank(), dist.get_world_size()
    target = world - 1
    store = dist.distributed_c10d._get_default_store()
    mine = torch.zeros(4096, dtype=torch.int32)
    win = dist._new_window(mine)
    if rank == 0:
        win.put(torch.arange(4096, dtype=torch.int32), target, 0, False)  # synchronous: landed when it returns
        store.set("window-put-done", "1")
    elif rank == target:
        store.wait(["window-put-done"], timedelta(seconds=30))
        assert torch.equal(mine, torch.arange(4096, dtype=torch.int32))  # landed before any wait_signal
        win.wait_signal(0, False)
    win.tensor_deregister()
    return rank


def test_puts_land_while_the_target_does_not_call_into_hier():
    assert run_job(2, case_target_never_calls_in, timeout_s=90) == [0, 1]


def case_registrations_do_not_share_signals():
    """A signal left over from one registration does not satisfy a wait of the next; a window dropped
    without deregistering keeps taking a peer's puts (its memory stays with the group)."""
    rank = dist.get_rank()
    win = dist._new_window(torch.zeros(8))
    if rank == 0:
        win.signal(1, False)
        win.signal(1, False)  # never waited for
    else:
        win.wait_signal(0, False)
    win.tensor_deregister()
    win.tensor_register(torch.zeros(8))
    if rank == 1:
        opts = torch._C._distributed_c10d.WaitSignalOptions()
        opts.timeout = timedelta(milliseconds=300)
        _raises(lambda: win.wait_signal(0, False, opts), "deadline")
    dist.barrier()
    if rank == 0:
        win.put(torch.full((8,), 5.0), 1, 0, False)
    else:
        win.wait_signal(0, False)
        assert torch.equal(win.map_remote_tensor(1), torch.full((8,), 5.0))
    win.tensor_deregister()

    dropped = dist._new_window(torch.zeros(1 << 16))
    if rank == 1:
        del dropped  # no deregistration: rank 0's puts below still land somewhere that is rank 1's
    dist.barrier()
    if rank == 0:
        for _ in range(3):
            dropped.put(torch.ones(1 << 16), 1, 0, False)
        del dropped
    t = torch.ones(4)
    dist.all_reduce(t)
    assert torch.all(t == 2)
    return rank


def test_registrations_do_not_share_signals_and_a_dropped_window_stays_safe():
    assert run_job(2, case_registrations_do_not_share_signals, timeout_s=90) == [0, 1]


def _raises(fn, *needles):
    with pytest.raises(Exception) as info:
        fn()
    text = str(info.value)
    for needle in needles:
        assert needle in text, text
    return text


def case_bad_calls():
    rank, world = dist.get_rank(), dist.get_world_size()
    peer = (rank + 1) % world
    win = dist._new_window()
    _raises(lambda: win.put(torch.zeros(2), peer, 0, False), "put", "tensor_register")
    # A registration one rank cannot make fails on every rank, naming that rank.
    odd = torch.zeros(8, 2).t() if rank == 1 else torch.zeros(16)
    _raises(lambda: win.tensor_register(odd), "tensor_register", "rank 1" if rank != 1 else "this rank", "contiguous")
    win.tensor_register(torch.zeros(16, dtype=torch.float32))
    _raises(lambda: win.tensor_register(torch.zeros(4)), "registered already")
    _raises(lambda: win.put(torch.zeros(2, dtype=torch.float64), peer, 0, False), "dtype", "Double", "Float")
    _raises(lambda: win.put(torch.zeros(4), peer, 13, False), "do not fit", "16 elements")
    _raises(lambda: win.put(torch.zeros(4), peer, -1, False), "do not fit")
    _raises(lambda: win.put(torch.zeros(2), rank, 0, False), "own window")
    _raises(lambda: win.put(torch.zeros(2), world, 0, False), "outside the group's ranks")
    _raises(lambda: win.signal(rank, False), "itself")
    _raises(lambda: win.map_remote_tensor(peer), "own window only")
    # A wait for a signal that never comes fails within its timeout, and the group goes on.
    opts = torch._C._distributed_c10d.WaitSignalOptions()
    opts.timeout = timedelta(milliseconds=500)
    start = time.monotonic()
    _raises(lambda: win.wait_signal(peer, False, opts), "wait_signal", "deadline")
    assert time.monotonic() - start < 10
    win.tensor_deregister()
    _raises(lambda: win.tensor_deregister(), "tensor_register")
    t = torch.full((10,), float(rank))
    dist.all_reduce(t)
    assert torch.all(t == sum(range(world)))
    return rank


def test_bad_calls_raise_naming_the_group_and_leave_it_usable():
    assert run_job(3, case_bad_calls, timeout_s=120) == [0, 1, 2]
