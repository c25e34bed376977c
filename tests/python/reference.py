"""Inputs every rank can rebuild for every other rank, and the results torch itself computes from them.

Each rank's contribution is drawn from a generator seeded with (seed, rank), so any rank can compute
the expected result of a collective locally, in a wide type (int64, float64, complex128), with
torch's own operations: an independent reference, not a second copy of hier's arithmetic.
"""

import functools

import torch
import torch.distributed as dist

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
    torch.complex64,
    torch.complex128,
]

REDUCE_OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM", "PREMUL_SUM_TENSOR"]
PREMUL_FACTOR = 0.5

# Element counts: empty, one, fewer than any ring needs, and large enough for the ring algorithms.
SIZES = [0, 1, 13, 70001]


def is_bitwise(op):
    return op in ("BAND", "BOR", "BXOR")


def supported(op, dtype):
    """The contract: which (reduce op, dtype) pairs a reduction must accept."""
    if is_bitwise(op):
        return not dtype.is_floating_point and not dtype.is_complex
    if op in ("MIN", "MAX"):
        return not dtype.is_complex
    if op == "AVG":
        return dtype != torch.bool
    if op.startswith("PREMUL_SUM"):
        return dtype.is_floating_point or dtype.is_complex
    return True


def reduce_op(op):
    if op == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(PREMUL_FACTOR)
    if op == "PREMUL_SUM_TENSOR":
        return dist._make_nccl_premul_sum(torch.tensor([PREMUL_FACTOR], dtype=torch.float64))
    return getattr(dist.ReduceOp, op)


def contribution(rank, numel, dtype, seed, op="SUM", shape=None):
    """Rank `rank`'s input: small integers, exact in every dtype and in sums of a few ranks. Drawn on the
    CPU, then placed on torch's default device (the CUDA tests make that a GPU)."""
    g = torch.Generator(device="cpu").manual_seed(seed * 1009 + rank)

    def draw(low, high):
        return torch.randint(low, high, (numel,), generator=g, device="cpu")

    if dtype == torch.bool:
        values = draw(0, 2).bool()
    elif op == "PRODUCT":
        # Products of a few ranks' values stay small: 1 or 2, with signs where the type has them.
        values = draw(1, 3)
        if dtype != torch.uint8:
            values = values * (draw(0, 2) * 2 - 1)
    elif dtype == torch.uint8:
        values = draw(0, 60)
    else:
        values = draw(-20, 21)
    if dtype.is_complex:
        imaginary = draw(-4, 5)
        values = torch.complex(values.double(), imaginary.double())
    values = values.to(dtype).to(torch.get_default_device())
    return values.reshape(shape) if shape is not None else values


def wide(t):
    if t.dtype == torch.bool:
        return t.to(torch.int64)
    if t.dtype.is_complex:
        return t.to(torch.complex128)
    if t.dtype.is_floating_point:
        return t.to(torch.float64)
    return t.to(torch.int64)


def expected_reduction(tensors, op, dtype):
    """What reducing `tensors` (one per rank) with `op` must give, as torch computes it."""
    n = len(tensors)
    if dtype == torch.bool:
        s = torch.stack([t.to(torch.int64) for t in tensors]).sum(0)
        if op in ("SUM", "MAX", "BOR"):
            return s > 0
        if op in ("PRODUCT", "MIN", "BAND"):
            return s == n
        if op == "BXOR":
            return s % 2 == 1
        raise ValueError(op)
    stacked = torch.stack([wide(t) for t in tensors])
    if op == "SUM":
        result = stacked.sum(0)
    elif op == "AVG":
        total = stacked.sum(0)
        if dtype.is_complex:
            # Each part divided on its own (as through view_as_real); torch's complex division rounds
            # differently in the last bit.
            result = torch.complex(total.real / n, total.imag / n)
        elif dtype in (torch.float16, torch.bfloat16):
            # As NCCL averages them: each term scaled by 1/n in the type, then summed, so that n terms near
            # the type's limit do not overflow (transport::averagesByPremultiplying).
            result = (stacked * (1.0 / n)).to(dtype).to(torch.float64).sum(0)
        elif dtype.is_floating_point:
            result = total / n
        else:
            result = torch.div(total, n, rounding_mode="trunc")
    elif op == "PRODUCT":
        result = stacked.prod(0)
    elif op == "MIN":
        result = stacked.amin(0)
    elif op == "MAX":
        result = stacked.amax(0)
    elif is_bitwise(op):
        fn = {"BAND": torch.bitwise_and, "BOR": torch.bitwise_or, "BXOR": torch.bitwise_xor}[op]
        result = functools.reduce(fn, list(stacked))
    elif op.startswith("PREMUL_SUM"):
        result = (stacked * PREMUL_FACTOR).sum(0)
    else:
        raise ValueError(op)
    return result.to(dtype)


def check_equal(actual, expected, what):
    """Exact for integers, bool and exactly representable results. float16/bfloat16 results that are not
    exact (averages: terms scaled by 1/n, then summed in an order and a precision that differ by road) may
    differ by 2 units in the last place of the tensor's largest element: a sum of scaled terms rounds at
    the terms' magnitude, not the result's. A missing or doubled contribution (a whole integer here) is
    still far outside that."""
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        raise AssertionError(f"{what}: got {actual.dtype}{tuple(actual.shape)}, expected "
                             f"{expected.dtype}{tuple(expected.shape)}")
    if actual.dtype in (torch.float16, torch.bfloat16):
        # Most results are exact, and the first assert_close on float16 in a process costs 0.7 s of CPU
        # here (later ones 1 ms): every rank of every pool paid it. It is only the second look.
        if torch.equal(actual, expected):
            return
        largest = expected.abs().max().to(torch.float32) if expected.numel() else torch.tensor(0.0)
        ulp = torch.finfo(actual.dtype).eps * max(float(largest), 1.0)
        torch.testing.assert_close(actual, expected, atol=2 * ulp, rtol=0, msg=lambda m: f"{what}: {m}")
    elif not torch.equal(actual, expected):
        bad = (actual != expected).nonzero()
        first = tuple(bad[0].tolist()) if len(bad) else None
        raise AssertionError(f"{what}: {len(bad)} elements differ, first at {first}: got "
                             f"{actual[first] if first is not None else '?'}, expected "
                             f"{expected[first] if first is not None else '?'}")


class Failures:
    """Collects every mismatch of a case, so one run reports all of them."""

    def __init__(self):
        self.messages = []

    def check(self, fn, *args):
        try:
            fn(*args)
        except AssertionError as e:
            self.messages.append(str(e))

    def raise_if_any(self, rank):
        if self.messages:
            shown = "\n".join(self.messages[:20])
            more = f"\n... and {len(self.messages) - 20} more" if len(self.messages) > 20 else ""
            raise AssertionError(f"rank {rank}: {len(self.messages)} mismatches:\n{shown}{more}")
