"""How long a CUDA collective holds the calling thread, hier beside ProcessGroupNCCL on the same ranks.

A CUDA collective should return once it is enqueued, so that the host runs ahead of the device; the time
the call itself takes (the "hold") is what a training loop loses on the CPU per collective. This times
each call of a loop on the host (perf_counter around the call and its wait(), which for a CUDA collective
orders the caller's stream and waits for nothing on the host), then the device's time per operation (the
loop and the synchronize after it, over the loop's length), for hier, ProcessGroupNCCL, and
ProcessGroupNCCL with a non-blocking communicator (the mode hier uses, so that a missing peer cannot hold
a thread forever). Run by tests/gpu/hold.sh; rank 0 prints one line per backend, mode, op and size:
median, 90th percentile and largest hold in us (the call and its wait()), the wait's median, and the
device's time per op.
"""

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist


def groups():
    made = {"hier": dist.group.WORLD, "nccl": dist.new_group(backend="nccl")}
    options = dist.ProcessGroupNCCL.Options()
    options.config.blocking = 0
    made["nccl-nonblocking"] = dist.new_group(backend="nccl", pg_options=options)
    return made


def call(op, tensor, out, group, async_op):
    if op == "broadcast":
        return dist.broadcast(tensor, 0, group=group, async_op=async_op)
    if op == "allreduce":
        return dist.all_reduce(tensor, group=group, async_op=async_op)
    if op == "allgather":
        return dist.all_gather_into_tensor(out, tensor, group=group, async_op=async_op)
    if op == "reduce_scatter":
        return dist.reduce_scatter_tensor(tensor, out, group=group, async_op=async_op)
    raise ValueError(op)


def measure(op, nbytes, group, iters, mode):
    """mode: "sync" (async_op=False), "async" (the call, then wait(), both counted) or "side" (async_op=False
    on a stream of its own)."""
    tensor = torch.ones(nbytes // 4, dtype=torch.float32, device="cuda")
    out = torch.ones(nbytes // 4 * dist.get_world_size(group), dtype=torch.float32, device="cuda")
    stream = torch.cuda.Stream() if mode == "side" else torch.cuda.current_stream()
    with torch.cuda.stream(stream):
        for _ in range(5):
            work = call(op, tensor, out, group, mode == "async")
            if work is not None:
                work.wait()
        torch.cuda.synchronize()
        dist.barrier(group=group)
        torch.cuda.synchronize()
        holds, waits = [], []
        start = time.perf_counter()
        for _ in range(iters):
            t0 = time.perf_counter()
            work = call(op, tensor, out, group, mode == "async")
            t1 = time.perf_counter()
            if work is not None:
                work.wait()
            t2 = time.perf_counter()
            holds.append(t2 - t0)
            waits.append(t2 - t1)
        torch.cuda.synchronize()
        per_op = (time.perf_counter() - start) / iters
    holds = sorted(h * 1e6 for h in holds)
    return {"median_us": statistics.median(holds), "p90_us": holds[int(0.9 * (len(holds) - 1))],
            "max_us": holds[-1], "wait_median_us": statistics.median(waits) * 1e6,
            "device_us_per_op": per_op * 1e6}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", nargs="+", type=int, default=[1024, 65536, 1 << 20, 4 << 20, 16 << 20])
    parser.add_argument("--ops", nargs="+", default=["broadcast", "allreduce", "allgather", "reduce_scatter"],
                        choices=["broadcast", "allreduce", "allgather", "reduce_scatter"])
    parser.add_argument("--iters", type=int, default=60)
    parser.add_argument("--modes", nargs="+", default=["sync"], choices=["sync", "async", "side"])
    parser.add_argument("--backends", nargs="+", default=["hier", "nccl", "nccl-nonblocking"])
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    dist.init_process_group(backend="hier")
    rows = []
    made = groups()
    for name in args.backends:
        for mode in args.modes:
            for op in args.ops:
                for nbytes in args.sizes:
                    row = {"backend": name, "mode": mode, "op": op, "bytes": nbytes,
                           **measure(op, nbytes, made[name], args.iters, mode)}
                    rows.append(row)
                    if dist.get_rank() == 0:
                        print(f"{name:17} {mode:5} {op:14} {nbytes:>9} B  hold median {row['median_us']:8.1f} us  "
                              f"p90 {row['p90_us']:8.1f}  max {row['max_us']:8.1f}  "
                              f"(wait {row['wait_median_us']:7.1f})  device {row['device_us_per_op']:8.1f} us/op",
                              flush=True)
    if dist.get_rank() == 0 and args.json:
        with open(args.json, "w") as out:
            json.dump({"blocking_env": os.environ.get("NCCL_COMM_BLOCKING"), "rows": rows}, out, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
