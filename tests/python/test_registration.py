"""How a program gets to hier: entry points, init methods, backend strings, names."""

import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.distributed as dist

from harness import TORCH_RELEASE, free_port, run_job


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


@pytest.mark.skipif(TORCH_RELEASE < (2, 14), reason=f"torch {torch.__version__} has no `torch.distributed.backends` "
                    "entry-point lookup (it came in torch 2.14); there, with TORCH_DEVICE_BACKEND_AUTOLOAD=0, "
                    "`import torch_hier` registers hier (test_import_torch_hier_registers_without_autoload)")
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


def test_import_torch_hier_registers_without_autoload():
    result = _python("""
        import torch, torch.distributed as dist
        assert "hier" not in dist.Backend.backend_list
        import torch_hier
        assert "hier" in dist.Backend.backend_list
        dist.init_process_group("hier", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
        t = torch.ones(3)
        dist.all_reduce(t)
        dist.destroy_process_group()
        print("ok")
    """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


def test_a_build_for_another_torch_release_warns_on_import_torch_and_refuses_to_load(tmp_path):
    # A copy of the installed package that says it was built for torch 2.9, first on the path.
    import torch_hier

    fake = tmp_path / "torch_hier"
    shutil.copytree(os.path.dirname(torch_hier.__file__), fake, ignore=shutil.ignore_patterns("__pycache__"))
    info = fake / "_build_info.py"
    info.write_text(re.sub(r'TORCH_RELEASE = "[0-9.]+"', 'TORCH_RELEASE = "2.9"', info.read_text()))
    result = _python("""
        import sys, torch, torch.distributed as dist  # the torch.backends entry point runs: it must only warn
        assert "hier" not in dist.Backend.backend_list, dist.Backend.backend_list
        try:
            import torch_hier
        except ImportError as error:
            print(error)
        else:
            raise AssertionError("import torch_hier did not fail")
        assert "torch_hier._C" not in sys.modules
    """, env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0, result.stdout + result.stderr
    expected = f"hier was built for torch 2.9 (against {torch_hier._build_info.TORCH_VERSION}) but torch {torch.__version__} is imported"
    assert "could not register the 'hier' backend: " + expected in result.stderr, result.stderr
    assert expected in result.stdout and "Rebuild hier against this torch" in result.stdout, result.stdout


def case_names_and_backends(expected_backend):
    assert dist.get_backend() == expected_backend, dist.get_backend()
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    assert backend.name() == "hier", backend.name()
    assert type(backend).__name__ == "ProcessGroupHier"
    t = torch.ones(4)
    dist.all_reduce(t)
    assert torch.all(t == dist.get_world_size())
    return backend.name()


def test_the_plugin_shares_the_processs_libstdcxx():
    # A static copy of libstdc++ inside the plugin splits streams, locales and exceptions from the copy torch
    # loaded: built with a toolchain whose own folder held only libstdc++.a, formatting an error message
    # crashed (meson.build names the shared library for that reason).
    import torch_hier

    folder = os.path.dirname(torch_hier.__file__)
    libraries = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".so"))
    assert len(libraries) >= 2, libraries  # the plugin and its Python binding
    for path in libraries:
        dynamic = subprocess.run(["readelf", "--dynamic", path], capture_output=True, text=True, check=True).stdout
        assert "[libstdc++.so.6]" in dynamic, f"{path} does not load libstdc++.so.6:\n{dynamic}"
        defined = subprocess.run(["nm", "--dynamic", "--defined-only", path], capture_output=True, text=True,
                                 check=True).stdout
        assert "_ZNSo9_M_insertIlEERSoT_" not in defined, f"{path} holds its own copy of libstdc++'s streams"


def test_init_methods_env_tcp_and_file():
    for init in ("env", "tcp", "file"):
        assert run_job(2, case_names_and_backends, "hier", init=init) == ["hier", "hier"], init


_LATE_RANK = """
    import datetime, sys, time, torch, torch.distributed as dist
    rank, port = int(sys.argv[1]), int(sys.argv[2])
    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, timeout=datetime.timedelta(seconds=60))
    if rank == 1:
        time.sleep(1.5)  # between the store and the group: rank 0 sets hier up alone meanwhile
    dist.init_process_group("hier", store=store, rank=rank, world_size=2)
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t)
    assert t.tolist() == [3.0] * 5, t
    dist.destroy_process_group()
    print("ok")
"""


def test_a_late_rank_leaves_no_warnings_in_its_peers_log():
    # hier's setup waits in the store for what a peer publishes. Waited for tick by tick, every tick that
    # timed out logged TCPStore's "waitForInput ... timed out after 100ms" (torch 2.15): 26 lines here.
    port = str(free_port())
    ranks = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(_LATE_RANK), str(rank), port],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    outputs = [rank.communicate(timeout=120) for rank in ranks]
    for rank, (stdout, stderr) in zip(ranks, outputs):
        assert rank.returncode == 0 and "ok" in stdout, stderr
    assert "waitForInput" not in outputs[0][1] and "timed out" not in outputs[0][1], outputs[0][1]


def test_per_device_backend_string():
    run_job(2, case_names_and_backends, "cpu:hier,cuda:hier", backend="cpu:hier,cuda:hier")


def test_the_binding_is_a_c10d_backend():
    import torch_hier

    assert issubclass(torch_hier.ProcessGroupHier, torch._C._distributed_c10d.Backend)
    info = torch_hier.info()
    assert info["built_for_torch"] == "%d.%d" % TORCH_RELEASE, info["built_for_torch"]
    assert torch.__version__.startswith(info["built_against_torch"]), info["built_against_torch"]
    assert info["ucx_version"].startswith("1.")
    assert info["reduce_kernels"] in ("x86-64-v3", "generic")


def case_cuda_direct_reported():
    import torch_hier

    t = torch.ones(4)
    dist.all_reduce(t)  # the group's UCX engine exists from here on
    return torch_hier.info()["cuda_direct"]


@pytest.mark.parametrize("setting, says", [
    (None, "this UCX takes host memory only"),
    ("0", "HIER_CUDA_DIRECT=0"),
    ("1", "HIER_CUDA_DIRECT=1 cannot apply"),
    ("on", "HIER_CUDA_DIRECT=on is not one of auto, 0"),
])
def test_info_says_whether_cuda_tensors_cross_hosts_from_device_memory(setting, says):
    # No GPU here: UCX takes host memory only, so every setting but 0 stages, and says why.
    if torch.cuda.is_available():
        pytest.skip("on a GPU UCX may take CUDA memory; tests/gpu checks the choice there")
    env = {} if setting is None else {"HIER_CUDA_DIRECT": setting}
    said = run_job(2, case_cuda_direct_reported, env=env)
    assert all(says in s for s in said), said
    if setting != "on":
        assert all(s.startswith("staged through pinned host memory") for s in said), said


def test_ucx_memory_hooks_are_needed_only_where_rdma_devices_are(tmp_path):
    from torch_hier._registration import ucx_memory_hooks_needed

    assert not ucx_memory_hooks_needed(str(tmp_path / "absent"))
    assert not ucx_memory_hooks_needed(str(tmp_path))
    (tmp_path / "mlx5_0").mkdir()
    assert ucx_memory_hooks_needed(str(tmp_path))


_HOOKS = """
    import os, tempfile, torch, torch.distributed as dist
    from torch_hier._registration import ucx_memory_hooks_needed
    dist.init_process_group("hier", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
    t = torch.ones(3)
    dist.all_reduce(t)
    assert t.tolist() == [1.0] * 3
    print(os.environ.get("UCX_MEM_EVENTS"), ucx_memory_hooks_needed())
"""


def test_ucx_memory_hooks_are_off_where_nothing_uses_them_unless_the_user_says():
    # UCX 1.22 spends 0.4 s of each process's start patching its memory hooks in; only RDMA devices use them.
    result = _python(_HOOKS)
    assert result.returncode == 0, result.stderr
    events, needed = result.stdout.split()
    assert events == ("None" if needed == "True" else "no"), result.stdout
    result = _python(_HOOKS, env={"UCX_MEM_EVENTS": "yes"})
    assert result.returncode == 0 and result.stdout.split()[0] == "yes", (result.stdout, result.stderr)
