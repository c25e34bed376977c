"""Tells meson.build where torch, UCX, the CUDA runtime and NCCL live in the Python environment.

Prints one `key=value` line per fact. Lists are joined with ';'. Run by meson at configure time with the
interpreter it builds for, so the answers describe exactly the torch the plugin will be loaded into.
"""

import os
import sys
import tomllib


def pinned_torch(source_root):
    with open(os.path.join(source_root, "pyproject.toml"), "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    for dep in deps:
        if dep.startswith("torch=="):
            return dep.split("==", 1)[1]
    sys.exit("pyproject.toml pins no torch version")


def main():
    source_root = sys.argv[1]
    pin = pinned_torch(source_root)
    # Plugins (hier's own entry point among them) have no business loading while we build.
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    try:
        import torch
        from torch.utils import cpp_extension
    except ImportError:
        sys.exit(f"torch=={pin} is not installed in {sys.executable}; run packaging/install.sh")

    version = torch.__version__.split("+", 1)[0]
    if version != pin:
        sys.exit(
            f"hier is built for torch=={pin} (pyproject.toml) but {sys.executable} has torch {torch.__version__}; "
            "a c10d plugin is tied to one torch ABI, so install the pinned version (packaging/install.sh)"
        )

    site = os.path.dirname(os.path.dirname(torch.__file__))
    torch_dir = os.path.dirname(torch.__file__)
    torch_lib = os.path.join(torch_dir, "lib")
    facts = {
        "torch_version": torch.__version__,
        "site_packages": site,
        # torch's bundled pybind11 comes first on the include path: a different pybind11 breaks the
        # binding of our Backend subclass to torch's c10d.Backend.
        "torch_includes": ";".join(cpp_extension.include_paths()),
        "torch_lib": torch_lib,
        "cxx11_abi": str(int(torch._C._GLIBCXX_USE_CXX11_ABI)),
        "torch_cuda": "1" if torch.version.cuda and os.path.exists(os.path.join(torch_lib, "libtorch_cuda.so")) else "0",
    }

    try:
        import libucx

        facts["ucx_prefix"] = os.path.dirname(libucx.__file__)
    except ImportError:
        facts["ucx_prefix"] = ""

    # The CUDA runtime headers and NCCL that torch itself loads come from the nvidia-* wheels.
    nvidia = os.path.join(site, "nvidia")
    cuda_major = (torch.version.cuda or "0").split(".")[0]
    candidates = [os.path.join(nvidia, f"cu{cuda_major}"), os.path.join(nvidia, "cuda_runtime"), "/usr/local/cuda"]
    facts["cuda_include"] = next((os.path.join(c, "include") for c in candidates
                                  if os.path.exists(os.path.join(c, "include", "cuda_runtime_api.h"))), "")
    cudart = [os.path.join(c, "lib", f"libcudart.so.{cuda_major}") for c in candidates[:2]]
    cudart += ["/usr/local/cuda/lib64/libcudart.so", "/usr/local/cuda/lib/libcudart.so"]
    facts["cudart"] = next((p for p in cudart if os.path.exists(p)), "")
    nccl_dir = os.path.join(nvidia, "nccl")
    facts["nccl_include"] = os.path.join(nccl_dir, "include") if os.path.exists(os.path.join(nccl_dir, "include", "nccl.h")) else ""
    facts["nccl_lib"] = os.path.join(nccl_dir, "lib", "libnccl.so.2") if os.path.exists(os.path.join(nccl_dir, "lib", "libnccl.so.2")) else ""

    for key, value in facts.items():
        print(f"{key}={value}")


if __name__ == "__main__":
    main()
