"""hier's ``torch.backends`` entry point (pyproject.toml): ``import torch`` calls :func:`autoload`.

A module of its own, outside the ``torch_hier`` package, so that loading the entry point cannot fail:
importing ``torch_hier`` raises when this build of hier is for another torch release than the one
running, and during ``import torch`` that must become a warning, never a broken ``import torch``.
"""

import warnings


def autoload():
    """Registers ``"hier"`` (importing ``torch_hier`` does), or warns why it could not."""
    try:
        from torch_hier import _registration

        _registration.register()
    except Exception as error:  # noqa: BLE001 - anything at all must become a warning here
        warnings.warn(f"torch_hier: could not register the 'hier' backend: {error}", stacklevel=2)
