"""Tells meson.build where torch, UCX, the CUDA runtime and NCCL live in the Python environment.

Prints one `key=value` line per fact. Lists are joined with ';'. Run by meson at configure time with the
interpreter it builds for, so the answers describe exactly the torch the plugin will be loaded into.
"""

import os
import sys
import tomllib


def supported_torch(source_root):
    """The torch releases hier builds against, from pyproject.toml's `torch>=A.B,<C.D` dependency:
    (A, B) up to but excluding (C, D), as (major, minor) pairs."""
    with open(os.path.join(source_root, "pyproject.toml"), "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    for dep in deps:
        if dep.replace(" ", "").startswith("torch>="):
            lower, upper = None, None
            for clause in dep.replace(" ", "")[len("torch"):].split(","):
                if clause.startswith(">="):
                    lower = tuple(int(x) for x in clause[2:].split(".")[:2])
                elif clause.startswith("<"):
                    upper = tuple(int(x) for x in clause[1:].split(".")[:2])
            if lower and upper:
                return lower, upper
    sys.exit("pyproject.toml: [project] dependencies has no `torch>=A.B,<C.D` range")


def main():
    source_root = sys.argv[1]
    lower, upper = supported_torch(source_root)
    if upper[1] > 0:  # the newest release supported is the one below the (exclusive) upper bound
        supported = f"{lower[0]}.{lower[1]} to {upper[0]}.{upper[1] - 1}"
    else:
        supported = f"{lower[0]}.{lower[1]} and later, below {upper[0]}.{upper[1]}"
    # Plugins (hier's own entry point among them) have no business loading while we build.
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    try:
        import torch
        from torch.utils import cpp_extension
    except ImportError:
        sys.exit(f"torch is not installed in {sys.executable}; hier builds against torch {supported}: "
                 "run packaging/install.sh (HIER_TORCH=<version> for another than the default)")

    version = torch.__version__.split("+", 1)[0]
    major_minor = tuple(int(x) for x in version.split(".")[:2])
    if not lower <= major_minor < upper:
        sys.exit(
            f"hier builds against torch {supported} (pyproject.toml) but {sys.executable} has torch "
            f"{torch.__version__}; install one of those (packaging/install.sh, HIER_TORCH=<version>)"
        )

    site = os.path.dirname(os.path.dirname(torch.__file__))
    torch_dir = os.path.dirname(torch.__file__)
    torch_lib = os.path.join(torch_dir, "lib")
    facts = {
        "torch_version": torch.__version__,
        # major.minor of the torch the binary is for (its C++ ABI); torch_hier refuses to load into another.
        "torch_release": f"{major_minor[0]}.{major_minor[1]}",
        "torch_supported": supported,
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
    toolkit = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    candidates = [os.path.join(nvidia, f"cu{cuda_major}"), os.path.join(nvidia, "cuda_runtime"), toolkit]
    # A header folder is usable only when complete: torch's CUDA 13 wheels ship cuda_runtime_api.h without
    # the crt/ headers it includes (they come in a wheel torch does not need), so a toolkit may serve instead.
    complete = ("cuda_runtime_api.h", os.path.join("crt", "host_defines.h"))
    facts["cuda_include"] = next((os.path.join(c, "include") for c in candidates
                                  if all(os.path.exists(os.path.join(c, "include", h)) for h in complete)), "")
    cudart = [os.path.join(c, "lib", f"libcudart.so.{cuda_major}") for c in candidates[:2]]
    cudart += [os.path.join(toolkit, "lib64", "libcudart.so"), os.path.join(toolkit, "lib", "libcudart.so")]
    facts["cudart"] = next((p for p in cudart if os.path.exists(p)), "")
    nccl_dir = os.path.join(nvidia, "nccl")
    facts["nccl_include"] = os.path.join(nccl_dir, "include") if os.path.exists(os.path.join(nccl_dir, "include", "nccl.h")) else ""
    facts["nccl_lib"] = os.path.join(nccl_dir, "lib", "libnccl.so.2") if os.path.exists(os.path.join(nccl_dir, "lib", "libnccl.so.2")) else ""

    for key, value in facts.items():
        print(f"{key}={value}")


if __name__ == "__main__":
    main()
