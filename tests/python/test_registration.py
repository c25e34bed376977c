"""How a program gets to hier: entry points, init methods, backend strings, names."""

import os
import subprocess
import sys
import textwrap

import torch
import torch.distributed as dist

from harness import run_job


def _python(code, env=None):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, env=full_env)


def test_import_torch_registers_hier_through_the_entry_point():
    result = _python("""
        import sys, torch, torch.distributed as dist
        assert "hier" in dist.Backend.backend_list, dist.Backend.backend_list
        # Registration alone loads neither the extension nor UCX.
        assert "torch_hier._C" not in sys.modules
        print("ok")
    """)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


def test_the_lazy_entry_point_works_without_autoload():
    result = _python("""
        import os, torch, torch.distributed as dist
        assert "hier" not in dist.Backend.backend_list
        dist.init_process_group("hier", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
        t = torch.ones(3)
        dist.all_reduce(t)
        assert dist.get_backend() == "hier"
        dist.destroy_process_group()
        print("ok")
    """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


def case_names_and_backends(expected_backend):
    assert dist.get_backend() == expected_backend, dist.get_backend()
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    assert backend.name() == "hier", backend.name()
    assert type(backend).__name__ == "ProcessGroupHier"
    t = torch.ones(4)
    dist.all_reduce(t)
    assert torch.all(t == dist.get_world_size())
    return backend.name()


def test_init_methods_env_tcp_and_file():
    for init in ("env", "tcp", "file"):
        assert run_job(2, case_names_and_backends, "hier", init=init) == ["hier", "hier"], init


def test_per_device_backend_string():
    run_job(2, case_names_and_backends, "cpu:hier,cuda:hier", backend="cpu:hier,cuda:hier")


def test_the_binding_is_a_c10d_backend():
    import torch_hier

    assert issubclass(torch_hier.ProcessGroupHier, torch._C._distributed_c10d.Backend)
    info = torch_hier.info()
    assert info["ucx_version"].startswith("1.")
    assert info["reduce_kernels"] in ("x86-64-v3", "generic")
