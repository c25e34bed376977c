"""Every test of torch's distributed suite that does not run on hier, and why.

run_torch_suite.py fails when a test is skipped for a reason not justified here, so this list cannot go
stale silently. Two kinds of entries:

* SKIPS: tests hier skips itself.
* SUITE_SKIPS: reasons the suite's own decorators give (a regular expression on the reason), with what
  they mean for hier on the CPU-only build and test machines, and where hier's own tests cover the
  same ground.
"""

SKIPS = {
    "test_ddp_logging_data_cpu": (
        "DDP's logger records c10d::ProcessGroup::getBackendName(), which torch 2.15 hard-wires to 'custom' "
        "for every out-of-tree backend (ProcessGroup.hpp, backendTypeToString), while the test expects "
        "'hier'. hier's Backend::getBackendName() is 'hier' (tests/python/test_registration.py)."
    ),
}

SUITE_SKIPS = [
    # No GPU on these machines. The CUDA path compiles in CI; its tests need a CUDA machine.
    (r"^Need at least \d+ accelerator devices?$", "needs GPUs: none on the CPU-only build machines"),
    (r"^accelerator is not available\.$", "needs a GPU: none on the CPU-only build machines"),
    (r"^Only (Nccl|NCCL|Gloo and NCCL|Gloo and Nccl) (supports?|backends? (will have|support)) CUDA ",
     "CUDA-tensor variants, hard-wired to NCCL or Gloo by the suite, and no GPU here anyway"),
    (r"^Only NCCL backend supports high priority stream$", "a ProcessGroupNCCL option"),
    (r"^NCCL (Batch )?Send Recv Only$", "CUDA point-to-point tests hard-wired to NCCL; hier's send/recv and "
     "batch_isend_irecv on CPU run in test_send_recv* and tests/python/test_collectives.py::send_recv"),
    (r"^Only Nccl supports (all_gather_v|reduce_scatter_v)$", "NCCL-only uneven variants; hier's uneven "
     "all_gather and reduce_scatter are covered by tests/python/test_collectives.py and the transport gtests"),
    (r"^Coalescing manager currently tests with NCCL only", "hard-wired to NCCL; hier's coalesced ops are "
     "tested through the coalescing manager in tests/python/test_collectives.py"),
    (r"^Test requires backend hier to be one of \{'nccl'\}$", "NCCL-specific behaviour (bool handling of "
     "the NCCL backend)"),
    # Tests the suite hard-wires to other backends although hier could run them; hier's tests cover them.
    (r"^Test requires backend hier to be one of \{'gloo'\}$", "hard-wired to Gloo: all_reduce_coalesced "
     "(covered by tests/python/test_collectives.py::allreduce_coalesced), monitored_barrier (Gloo-only API) "
     "and Gloo's no_sync gradient check"),
    (r"^Only gloo backend supports timeouts$", "hard-wired to Gloo; hier's timeouts are tested in "
     "tests/python/test_failures.py"),
    (r"^Only Gloo backend supports sparse all reduce$", "sparse allreduce: hier refuses sparse tensors with a "
     "clear error (tests/python/test_errors.py)"),
    (r"^GLOO Batch Send Recv CPU$", "hard-wired to Gloo; batch_isend_irecv on hier runs in test_batch_isend_irecv*"),
    (r"^get_future is only supported on mpi, nccl and gloo$", "hard-wired list; hier's futures are tested in "
     "tests/python/test_work.py and drive DDP in tests/python/test_ddp.py"),
    (r"^Only MPI supports (CPU all_to_all_single|all_to_all)$", "hard-wired to MPI; hier's all_to_all and "
     "all_to_all_single are tested in tests/python/test_collectives.py::all_to_all"),
    (r"^Only Nccl & Gloo backend support DistributedDataParallel$", "hard-wired list; DDP on hier runs in "
     "tests/python/test_ddp.py and in the suite's other DDP tests"),
    (r"^hier does not support all_gather_coalesced$", "the deprecated list-of-lists allgather_coalesced, which "
     "torch's Backend.hpp asks backends not to implement; all_gather_into_tensor_coalesced is implemented"),
    # World sizes: the suite runs at WORLD_SIZE=3, and again at 4 and 8 for these (tests/run.sh).
    (r"^Skipped due to small world size\.$", "runs in the WORLD_SIZE=8 pass"),
    (r"^Test requires (an exact )?world size of 4$", "runs in the WORLD_SIZE=4 pass"),
    # Disabled upstream for every backend.
    (r"^https://github\.com/pytorch/pytorch/issues/\d+$", "disabled upstream for every backend"),
    (r"^Test is failing, see https://github\.com/pytorch/pytorch/pull/113620$", "disabled upstream"),
    (r"^no torchvision$", "needs torchvision, which hier does not install"),
]
