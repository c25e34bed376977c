"""hier: a hierarchical ``torch.distributed`` backend.

NCCL carries CUDA tensors inside a node, UCX carries everything between nodes and CPU tensors
everywhere. Importing this package registers the backend as ``"hier"``; with the package installed,
``import torch`` does that too (through the ``torch.backends`` entry point)::

    import torch.distributed as dist
    dist.init_process_group(backend="hier")
"""

from torch_hier._registration import BACKEND_NAME, register

__all__ = ["BACKEND_NAME", "ProcessGroupHier", "info", "register"]
__version__ = "0.1.0"

register()


def info():
    """What this build of hier contains (UCX and NCCL versions, kernels) and its HIER_* settings."""
    from torch_hier._registration import load_extension

    return dict(load_extension().info())


def __getattr__(name):
    # The extension (and with it UCX) loads on first use, not on import.
    if name == "ProcessGroupHier":
        from torch_hier._registration import load_extension

        return load_extension().ProcessGroupHier
    raise AttributeError(f"module 'torch_hier' has no attribute {name!r}")
