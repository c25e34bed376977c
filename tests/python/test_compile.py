"""torch.compile (Dynamo + Inductor, CPU) of code that calls collectives on hier groups, on 2 real processes.

Dynamo rewrites the in-place ``torch.distributed`` calls into ``_c10d_functional`` ops and Inductor emits
them in its generated code, where they reach hier by group name. Each case compiles with
``fullgraph=True`` (a graph break would hide the collective from the compiler), checks the generated
code really calls the functional ops, and compares the compiled result, and its gradients, with what
the rank computes locally from every rank's reproducible input. Compiling is slow on two cores, so
the cases are few and each compiles once.
"""

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch._inductor.utils import run_and_get_code


def check_close(actual, expected, what):
    """Inductor fuses and reorders float arithmetic, so compiled results match to rounding, not bit for bit."""
    torch.testing.assert_close(actual, expected, rtol=1e-12, atol=1e-12, msg=lambda m: f"{what}: {m}")


def _inputs(seed, shape):
    """Every rank's input, reproducible on every rank."""
    world = dist.get_world_size()
    return [torch.randn(shape, generator=torch.Generator().manual_seed(seed * 100 + r), dtype=torch.float64)
            for r in range(world)]


def _compile(fn):
    torch._dynamo.reset()
    # A cache hit would skip code generation, and with it the check of what the generated code calls.
    torch._inductor.config.force_disable_caches = True
    return torch.compile(fn, fullgraph=True, backend="inductor")


def _generated(code):
    return "\n".join(code)


def case_in_place_collectives_are_traced(seed):
    """dist.all_reduce / all_gather_into_tensor / reduce_scatter_tensor / all_to_all_single in one graph."""
    rank, world = dist.get_rank(), dist.get_world_size()
    group = dist.group.WORLD
    rows = 2 * world

    def step(x, w):
        y = x @ w
        dist.all_reduce(y, op=dist.ReduceOp.SUM, group=group)
        gathered = y.new_empty(world * rows, y.shape[1])
        dist.all_gather_into_tensor(gathered, y * (rank + 1), group=group)
        scattered = y.new_empty(rows, y.shape[1])
        dist.reduce_scatter_tensor(scattered, gathered, op=dist.ReduceOp.MAX, group=group)
        exchanged = torch.empty_like(scattered)
        dist.all_to_all_single(exchanged, scattered.relu() + 1, group=group)
        return y, gathered, scattered, exchanged.sin()

    xs, ws = _inputs(seed, (rows, 8)), _inputs(seed + 1, (8, 4))
    compiled = _compile(step)
    outputs, code = run_and_get_code(compiled, xs[rank], ws[rank])
    code = _generated(code)
    for op in ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single", "wait_tensor"):
        assert f"_c10d_functional.{op}" in code, f"{op} is missing from Inductor's code:\n{code[-3000:]}"

    # Local reference, from every rank's input.
    y = sum(xs[r] @ ws[r] for r in range(world))
    gathered = torch.cat([y * (r + 1) for r in range(world)])
    scattered_all = [torch.stack([gathered] * world).amax(0)[r * rows:(r + 1) * rows] for r in range(world)]
    chunk = rows // world
    exchanged = torch.cat([(scattered_all[r].relu() + 1)[rank * chunk:(rank + 1) * chunk] for r in range(world)])
    for got, want, what in zip(outputs, (y, gathered, scattered_all[rank], exchanged.sin()),
                               ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single")):
        check_close(got, want, f"compiled {what}")
    # Eager and compiled agree too, and the compiled function can run again (no stale state).
    for got, want in zip(compiled(xs[rank], ws[rank]), step(xs[rank], ws[rank])):
        check_close(got, want, "compiled (second call) against eager")


def case_functional_collectives_by_name_with_backward(seed):
    """funcol's autograd collectives, the group named by string, compiled forward and backward."""
    rank, world = dist.get_rank(), dist.get_world_size()
    name = dist.group.WORLD.group_name

    def loss_of(x, w):
        local = torch.tanh(x @ w)
        full = funcol.all_gather_tensor_autograd(local, 0, name)           # backward: reduce_scatter
        shard = funcol.reduce_scatter_tensor_autograd(full * full, "sum", 0, name)  # backward: all_gather
        swapped = funcol.all_to_all_single_autograd(shard, None, None, name)
        return (swapped * torch.arange(1, swapped.numel() + 1, dtype=swapped.dtype).view_as(swapped)).sum()

    rows = 2 * world
    xs, ws = _inputs(seed, (rows, 6)), _inputs(seed + 1, (6, 3))
    compiled = _compile(loss_of)
    w = ws[rank].clone().requires_grad_()
    loss, forward = run_and_get_code(compiled, xs[rank], w)
    _, backward = run_and_get_code(loss.backward)  # AOTAutograd compiles the backward on first use
    for what, code in (("forward", _generated(forward)), ("backward", _generated(backward))):
        for op in ("all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single"):
            assert f"_c10d_functional.{op}" in code, f"{op} is missing from Inductor's {what}:\n{code[-3000:]}"

    # Reference: the same computation as one process holding every rank's leaf, autograd in float64.
    leaves = [ws[r].clone().requires_grad_() for r in range(world)]
    full = torch.cat([torch.tanh(xs[r] @ leaves[r]) for r in range(world)])
    summed = world * full * full  # reduce_scatter(sum) of identical full tensors from every rank
    shards = [summed[r * rows:(r + 1) * rows] for r in range(world)]
    chunk = rows // world
    total = 0
    for dst in range(world):
        swapped = torch.cat([shards[src][dst * chunk:(dst + 1) * chunk] for src in range(world)])
        weighted = (swapped * torch.arange(1, swapped.numel() + 1, dtype=swapped.dtype).view_as(swapped)).sum()
        total = total + weighted
        if dst == rank:
            check_close(loss.detach(), weighted.detach(), "compiled loss")
    total.backward()
    check_close(w.grad, leaves[rank].grad, "compiled backward through the collectives")


@pytest.fixture(scope="module")
def pool(pools):
    return pools(2)


def test_in_place_collectives_compile_into_functional_ops(pool):
    pool.run(case_in_place_collectives_are_traced, 1)


def test_functional_collectives_compile_forward_and_backward(pool):
    pool.run(case_functional_collectives_by_name_with_backward, 2)
