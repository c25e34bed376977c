"""The README's main job, torch_hier.demo, runs as packaging/demo.sh runs it (torchrun, here 3 ranks and
smaller sizes): every collective checked against Gloo, the short benchmark checked, DDP's losses equal to
Gloo's. demo.sh itself also installs; this runs the module on what the test session already built."""

import os
import subprocess
import sys


def test_the_demo_checks_every_collective_the_benchmark_and_ddp_against_gloo(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", UCX_WARN_UNUSED_ENV_VARS="n")
    ran = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
         "-m", "torch_hier.demo", "--sizes", "5", "3000", "--iterations", "2", "--steps", "4",
         "--bench-sizes", "4096", "65536"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-4000:]
    assert "all results right" in ran.stdout, ran.stdout[-4000:]
    assert "losses match Gloo's: yes" in ran.stdout, ran.stdout[-4000:]
    assert "WRONG" not in ran.stdout and " NO" not in ran.stdout, ran.stdout[-4000:]
