"""Registers the ``"hier"`` backend with ``torch.distributed``.

Registration only records a creator function; the C++ extension and UCX load when the first ``hier``
group is made. That keeps ``import torch`` (which runs :func:`autoload` through the ``torch.backends``
entry point) cheap and fork-safe.
"""

import importlib
import warnings

BACKEND_NAME = "hier"
_extension = None


def load_extension():
    """Loads ``torch_hier._C`` (and the UCX libraries it links) once."""
    global _extension
    if _extension is None:
        try:
            import libucx

            # The UCX wheel's libraries, loaded so that our extension's libucp.so.0 resolves to them.
            libucx.load_library()
        except ImportError:
            pass  # a build against the system UCX
        _extension = importlib.import_module("torch_hier._C")
    return _extension


def _create_backend(dist_backend_opts, backend_options):
    """The creator torch.distributed calls for each new ``hier`` group (``extended_api=True``)."""
    extension = load_extension()
    timeout = dist_backend_opts.timeout
    if isinstance(backend_options, extension.ProcessGroupHier.Options):
        timeout = backend_options._timeout
    elif backend_options is not None:
        raise TypeError(
            f"hier: pg_options must be torch_hier.ProcessGroupHier.Options, not {type(backend_options).__name__}"
        )
    return extension.ProcessGroupHier(
        dist_backend_opts.store,
        dist_backend_opts.group_rank,
        dist_backend_opts.group_size,
        timeout,
        dist_backend_opts.group_id,
        list(dist_backend_opts.global_ranks_in_group),
    )


def register():
    """Registers ``"hier"`` for CPU and CUDA tensors. Safe to call more than once."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    if BACKEND_NAME in dist.Backend.backend_list:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, extended_api=True, devices=["cpu", "cuda"])


def autoload():
    """The ``torch.backends`` entry point: never lets a problem here break ``import torch``."""
    try:
        register()
    except Exception as error:  # noqa: BLE001 - anything at all must become a warning here
        warnings.warn(f"torch_hier: could not register the 'hier' backend: {error}", stacklevel=2)
