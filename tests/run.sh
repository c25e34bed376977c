#!/usr/bin/env bash
# The test command (README): installs what it needs (packaging/install.sh), then runs
#   1. the transport's C++ tests (GoogleTest; real processes, real UCX),
#   2. the torch adapter's tests (pytest; real multi-process jobs on hier, against local references and Gloo),
#   3. torch's own distributed test suite on hier (tests/torch_suite; skips justified in skips.py),
#   4. the wheel `pip install --no-build-isolation .` builds, in an environment of its own (tests/wheel).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/packaging/install.sh"
venv="${HIER_VENV:-$root/.venv}"
# shellcheck disable=SC1091
source "$venv/bin/activate"
cd "$root"
export UCX_WARN_UNUSED_ENV_VARS=n
export CUDA_VISIBLE_DEVICES=""  # CPU tensors; the CUDA tests need a GPU machine (see README)

section() { printf '\n==== %s\n' "$*"; }

section "transport (C++, GoogleTest)"
meson test -C build --print-errorlogs

section "torch adapter (pytest)"
python -m pytest tests/python tests/multinode tests/gpu -q -rs

section "torch's distributed test suite on hier"
suite() {  # WORLD_SIZE, log name, unittest arguments...
  local world="$1" log="build/torch-suite-$2.log"; shift 2
  if WORLD_SIZE="$world" python tests/torch_suite/run_torch_suite.py "$@" >"$log" 2>&1; then
    sed -n '/^Ran [0-9]* of/p' "$log" | sed "s/^/  WORLD_SIZE=$world: /"
  else
    sed -n '/^Skipped tests by reason/,$p;/^\(ERROR\|FAIL\): /p' "$log"
    echo "torch's suite failed at WORLD_SIZE=$world; the whole log is $log"
    return 1
  fi
}
suite 3 ws3
suite 4 ws4 -k test_3_level_hierarchical_model_averager -k test_gather_object -k test_new_subgroups
suite 8 ws8 -k test_all_gather_group -k test_all_reduce_group_ -k test_barrier_group -k test_broadcast_group \
  -k test_gather_group -k test_reduce_group_ -k test_scatter_group
section "the wheel in an environment of its own"
./tests/wheel/check_wheel.sh 2>&1 | grep -v "Failed to initialize NumPy\|_conversion_method_template"

section "all tests passed"
