"""hier: a hierarchical ``torch.distributed`` backend.

NCCL carries CUDA tensors inside a node, UCX carries everything between nodes and CPU tensors
everywhere. Importing this package registers the backend as ``"hier"``; with the package installed,
``import torch`` does that too (through the ``torch.backends`` entry point)::

    import torch.distributed as dist
    dist.init_process_group(backend="hier")

A build of hier is for the torch minor release it was compiled against (2.11 to 2.15 are supported);
importing it with another torch raises ImportError, saying how to rebuild.
"""

from torch_hier._registration import BACKEND_NAME, register

__all__ = [
    "BACKEND_NAME",
    "ProcessGroupHier",
    "create_group",
    "destroy_group",
    "info",
    "register",
    "resolve_group",
    "set_thread_isolation_mode",
    "work_table",
]
__version__ = "0.1.0"

register()  # raises ImportError when this build is for another torch release


def info():
    """What this build of hier contains (UCX and NCCL versions, kernels) and its HIER_* settings."""
    from torch_hier._registration import load_extension

    return dict(load_extension().info())


def _extension():
    from torch_hier._registration import load_extension

    return load_extension()


def create_group(store, rank, size, name, timeout=None, global_ranks=(), description=""):
    """Creates a ``hier`` process group without ``torch.distributed``'s world: every member calls it with the
    same ``store``, ``size`` and ``name`` and its own ``rank``. The group is registered under ``name``, so
    functional collectives (``torch.ops._c10d_functional.*``, ``torch.distributed._functional_collectives``)
    find it by that name. It lives until :func:`destroy_group`.
    """
    import datetime

    timeout = timeout if timeout is not None else datetime.timedelta(minutes=30)
    return _extension().create_group(store, rank, size, name, timeout, list(global_ranks), description)


def resolve_group(name):
    """The process group registered under ``name``: made by :func:`create_group` or by ``torch.distributed``."""
    return _extension().resolve_group(name)


def destroy_group(name):
    """Shuts down a group made by :func:`create_group` (queued work finishes first) and frees its name."""
    _extension().destroy_group(name)


def set_thread_isolation_mode(enable):
    """Threads as ranks: with ``enable``, each thread has group names (hier's and c10d's) and a UCX engine of
    its own, so several ranks of one group can live in one process. Set it before creating groups."""
    _extension().set_thread_isolation_mode(enable)


def work_table(group=None, format="text"):
    """The ``hier`` group's operations in flight, never waited for, and recently finished (``format`` is
    ``"text"`` or ``"json"``). ``group`` defaults to the default process group."""
    import torch
    import torch.distributed as dist

    group = group if group is not None else dist.group.WORLD
    backend = group._get_backend(torch.device("cpu"))
    if not isinstance(backend, _extension().ProcessGroupHier):
        raise ValueError(f"hier: work_table: group '{group.group_name}' is not a hier group")
    return backend.work_table(format)


def __getattr__(name):
    # The extension (and with it UCX) loads on first use, not on import.
    if name == "ProcessGroupHier":
        from torch_hier._registration import load_extension

        return load_extension().ProcessGroupHier
    raise AttributeError(f"module 'torch_hier' has no attribute {name!r}")
