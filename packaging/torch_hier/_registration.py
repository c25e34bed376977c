"""Registers the ``"hier"`` backend with ``torch.distributed``.

Registration only records a creator function; the C++ extension and UCX load when the first ``hier``
group is made. That keeps ``import torch`` (which registers hier through the ``torch.backends`` entry
point, ``_torch_hier_autoload``) cheap and fork-safe.

A build of hier is for one torch minor release (a c10d plugin is bound to its C++ ABI): registering and
loading check that the running torch is that release, and say how to rebuild when it is not.
"""

import importlib
import os

BACKEND_NAME = "hier"
_extension = None


def check_torch_release():
    """Raises ImportError when the running torch is not the minor release this build of hier is for."""
    import torch

    try:
        from torch_hier._build_info import TORCH_RELEASE, TORCH_SUPPORTED, TORCH_VERSION
    except ImportError:
        return  # not a build (a source tree on sys.path): there is no extension to protect either
    running = ".".join(torch.__version__.split("+", 1)[0].split(".")[:2])
    if running != TORCH_RELEASE:
        raise ImportError(
            f"hier was built for torch {TORCH_RELEASE} (against {TORCH_VERSION}) but torch {torch.__version__} "
            "is imported; a c10d plugin is bound to the C++ ABI of one torch release. Rebuild hier against this "
            "torch: `pip install --no-build-isolation --no-deps <hier checkout>` in this environment, or "
            f"`HIER_TORCH=<version> packaging/install.sh` from the checkout (hier supports torch {TORCH_SUPPORTED})"
        )


def ucx_memory_hooks_needed(rdma_devices="/sys/class/infiniband"):
    """Whether UCX's memory hooks have a use on this host: they keep its caches of memory registrations
    true when memory is freed, and only RDMA devices (InfiniBand, RoCE, EFA) register host memory; TCP,
    shared memory and cross-memory attach register nothing, and hier names each buffer's memory type."""
    try:
        return bool(os.listdir(rdma_devices))
    except OSError:
        return False


def _hooks_off_where_unused():
    # UCX patches mmap and its kin when its library loads, waiting 5 ms at each patch for running callers
    # to leave the code (UCX 1.22): 0.4 s of every rank's start. The user's UCX_MEM_* settings stand.
    if not any(name.startswith("UCX_MEM_") for name in os.environ) and not ucx_memory_hooks_needed():
        os.environ["UCX_MEM_EVENTS"] = "no"


def load_extension():
    """Loads ``torch_hier._C`` (and the UCX libraries it links) once."""
    global _extension
    if _extension is None:
        check_torch_release()
        _hooks_off_where_unused()  # read by UCX as it loads
        from torch_hier._build_info import UCX

        if UCX == "wheel":
            import libucx

            # The UCX wheel's libraries, loaded so that our extension's libucp.so.0 resolves to them. A
            # build against the system's UCX (-Ducx=system) must not load them: they would take its place.
            libucx.load_library()
        _extension = importlib.import_module("torch_hier._C")
    return _extension


def _create_backend(dist_backend_opts, backend_options):
    """The creator torch.distributed calls for each new ``hier`` group (``extended_api=True``)."""
    extension = load_extension()
    timeout = dist_backend_opts.timeout
    high_priority = False
    if isinstance(backend_options, extension.ProcessGroupHier.Options):
        timeout = backend_options._timeout
        high_priority = backend_options.is_high_priority_stream
    elif backend_options is not None:
        raise TypeError(
            f"hier: pg_options must be torch_hier.ProcessGroupHier.Options, not {type(backend_options).__name__}"
        )
    backend = extension.ProcessGroupHier(
        dist_backend_opts.store,
        dist_backend_opts.group_rank,
        dist_backend_opts.group_size,
        timeout,
        dist_backend_opts.group_id,
        list(dist_backend_opts.global_ranks_in_group),
        high_priority,
    )
    # A new group of a default group bound to a device (init_process_group(device_id=...)): torch splits it
    # from the default group, whose other ranks call perform_nocolor_split; on a CUDA device this group's
    # NCCL communicator comes from the parent's by ncclCommSplit, where the parent has one.
    parent = getattr(dist_backend_opts, "split_from", None)
    if isinstance(parent, extension.ProcessGroupHier):
        import torch.distributed as dist

        device = dist.distributed_c10d._get_default_group().bound_device_id
        if device is not None and device.type == "cuda":
            backend._split_cuda_from(parent, device.index if device.index is not None else 0)
    # A new group takes the ranks' hosts and addresses from the default group, where that one issued a
    # collective (which learns them on all its ranks): its first operation then makes no exchange of its
    # own. With HIER_EAGER_INIT=1 the group sets up now. After the split, which the ranks left out of this
    # group are waiting in.
    backend._start(_default_hier_backend(extension))
    return backend


def _default_hier_backend(extension):
    """The default group's hier backend (for either device), or None: no default group yet (this is it),
    or it runs on other backends."""
    import torch
    import torch.distributed as dist

    world = dist.distributed_c10d.GroupMember.WORLD
    if world is None:
        return None
    for device_type in ("cpu", "cuda"):
        try:
            backend = world._get_backend(torch.device(device_type))
        except RuntimeError:
            continue
        if isinstance(backend, extension.ProcessGroupHier):
            return backend
    return None


def register():
    """Registers ``"hier"`` for CPU and CUDA tensors. Safe to call more than once. Raises ImportError when
    this build of hier is for another torch release than the one running."""
    import torch.distributed as dist

    check_torch_release()

    if not dist.is_available():
        return
    # From torch 2.15 on, torch attaches a FlightRecorderHook to every group whose backends do not
    # record their own operations. hier does: each group's work table (torch_hier.work_table, written
    # out when an operation fails). The hook would record them a second time, never as completed (hier
    # registers no completion hooks), and cost more than a small collective itself (docs/measurements.md).
    self_recording = getattr(dist.distributed_c10d, "_FR_SELF_RECORDING_BACKENDS", None)
    if self_recording is not None:
        self_recording.add(BACKEND_NAME)
    if BACKEND_NAME in dist.Backend.backend_list:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, extended_api=True, devices=["cpu", "cuda"])
