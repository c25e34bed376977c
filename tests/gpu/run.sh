#!/usr/bin/env bash
# The CUDA tests, for a machine with CUDA GPUs (the CPU-only build machines skip them, saying why):
# the NCCL half of the transport's gtests and tests/gpu.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
"$root/packaging/install.sh"
venv="${HIER_VENV:-$root/.venv}"
source "$venv/bin/activate"
cd "$root"
python -c 'import torch; assert torch.cuda.is_available(), "no CUDA GPU visible"; print(torch.cuda.device_count(), "GPUs")'
build/tests/transport_tests --gtest_filter='Nccl*'
python -m pytest tests/gpu -v -rs
