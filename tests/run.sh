#!/usr/bin/env bash
# The test command (README): installs what it needs (packaging/install.sh), then runs
#   1. hier built against the oldest torch supported (pyproject.toml's [tool.hier] torch-oldest), in its
#      own environment and build directory, through the pytest files that cover registration, every
#      collective, errors, Work and the functional collectives; first, so that its environment can go
#      again before the newest torch's is made where the disk is short (each is about 6 GB),
#   2. the transport's C++ tests (GoogleTest; real processes, real UCX), then built against the system's
#      UCX (-Ducx=system, Debian's libucx-dev) and run again, then under AddressSanitizer +
#      UndefinedBehaviorSanitizer and under ThreadSanitizer, and part of the Python suite on the plugin built
#      with AddressSanitizer + UndefinedBehaviorSanitizer (tests/sanitizers/run.sh),
#   3. the torch adapter's tests (pytest; real multi-process jobs on hier, against local references and Gloo),
#   4. torch's own distributed test suite on hier (tests/torch_suite; skips justified in skips.py),
#   5. the framework suite (tests/frameworks): Lightning, Accelerate, torchft, DCP, DTensor, pipelining on
#      hier and on Gloo, in an environment of their own,
#   6. the wheel `pip install --no-build-isolation .` builds, in an environment of its own (tests/wheel),
# 2-6 against the newest torch supported (or HIER_TORCH), in .venv and build/.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/packaging/env.sh"  # hier_torch, hier_torch_oldest, venv, build (HIER_TORCH, HIER_VENV)
cd "$root"
export UCX_WARN_UNUSED_ENV_VARS=n
export CUDA_VISIBLE_DEVICES=""  # CPU tensors; the CUDA tests need a GPU machine (docs/gpu.md)

section() {  # the time so far (CI's budget is 45 minutes) and the disk left (the environments take GBs)
  printf '\n==== %s (%d s in, %s free on disk)\n' "$*" "$SECONDS" "$(df -h --output=avail "$root" | tail -1 | tr -d ' ')"
}

section "the oldest torch supported: hier built against torch $hier_torch_oldest"
if [ "$(echo "$hier_torch" | cut -d. -f1,2)" != "$(echo "$hier_torch_oldest" | cut -d. -f1,2)" ]; then
  # Its own environment and build directory (.venv-torch<release>, build-torch<release>), whatever
  # HIER_VENV says for the newest; a run without that environment downloads torch (a few GB) and builds.
  start=$SECONDS
  (unset HIER_VENV; HIER_TORCH="$hier_torch_oldest" "$root/packaging/install.sh")
  read -r oldest_venv oldest_build < <(unset HIER_VENV; HIER_TORCH="$hier_torch_oldest"; source "$root/packaging/env.sh"; echo "$venv $build")
  echo "  installed and built in $((SECONDS - start)) s"
  "$oldest_venv/bin/python" -c 'import torch, torch_hier; print("  torch", torch.__version__, "with hier built for", torch_hier.info()["built_for_torch"])'
  HIER_BUILD_DIR="$oldest_build" "$oldest_venv/bin/python" -m pytest -q -rs tests/python/test_registration.py \
    tests/python/test_collectives.py tests/python/test_errors.py tests/python/test_work.py \
    tests/python/test_functional.py tests/python/test_libtorch.py tests/python/test_coalescing.py
  # Kept for the next run where the disk has room for it beside the newest torch's environment and the
  # builds below; otherwise removed with uv's cache (whose files the environment's are hard links to), and
  # the next install downloads them again.
  free_gb=$(df --output=avail -BG "$root" | tail -1 | tr -dc 0-9)
  if [ "$free_gb" -lt 20 ]; then
    echo "  removing $oldest_venv and $uv_cache ($(du -sch "$oldest_venv" "$uv_cache" | tail -1 | cut -f1)):" \
      "the disk has $free_gb GB free, under 20"
    rm -rf "$oldest_venv" "$uv_cache"
  fi
else
  echo "  HIER_TORCH=$hier_torch is of the oldest release: the steps below test it"
fi

section "the newest torch supported: torch $hier_torch"
"$root/packaging/install.sh"
# shellcheck disable=SC1091
source "$venv/bin/activate"
export HIER_BUILD_DIR="$build"  # where tests/python/test_libtorch.py finds the LibTorch program

section "transport (C++, GoogleTest)"
meson test -C "$build" --print-errorlogs

section "transport against the system's UCX (-Ducx=system: Debian's libucx-dev, with InfiniBand and RoCE)"
# What a cluster's build is (its UCX, not the wheel's): the torch-free transport and its tests only, in a
# build directory of their own, the plugin left out for CI's time (docs/tests.md).
system_build="$root/build-ucx-system"
[ -f "$system_build/build.ninja" ] || meson setup "$system_build" -Ducx=system -Dgtest=enabled >/dev/null
ninja -C "$system_build" tests/transport_tests >/dev/null
echo "  UCX $(pkg-config --modversion ucx) from $(pkg-config --variable=libdir ucx)"
UCX_WARN_UNUSED_ENV_VARS=n "$system_build/tests/transport_tests" --gtest_brief=1 --gtest_filter=-Staging*

section "under sanitizers: transport (ASan+UBSan, TSan), part of the Python suite (ASan+UBSan)"
./tests/sanitizers/run.sh  # build-asan/, build-tsan/: about 12 minutes from scratch

section "torch adapter (pytest)"
# tests/multinode runs beside the rest. Its jobs run on simulated hosts, each with its own network and
# /dev/shm, so they cannot disturb the other files' checks of /dev/shm and their ports. Much of each part
# is waiting (process start-up, deadlines): together they took 512 s where one after the other took 627 s
# (two cores). Its output comes after the rest's.
multinode_log="$build/pytest-multinode.log"
python -m pytest tests/multinode -q -rs >"$multinode_log" 2>&1 &
multinode=$!
adapter=0
python -m pytest tests/python tests/gpu -q -rs || adapter=1
wait "$multinode" || adapter=1
echo "-- tests/multinode:"
cat "$multinode_log"
[ "$adapter" -eq 0 ]

section "torch's distributed test suite on hier"
suite() {  # WORLD_SIZE, log name, unittest arguments...
  local world="$1" log="$build/torch-suite-$2.log"; shift 2
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
  -k test_gather_group -k test_reduce_group_ -k test_scatter_group -k test_all_reduce_coalesced_group \
  -k test_all_gather_coalesced_group \
  -k test_all_to_all_group -k test_all_to_all_single_equal_split_group -k test_all_to_all_single_unequal_split_group \
  -k test_barrier_timeout_group -k test_monitored_barrier_failure_order -k test_monitored_barrier_wait_all_ranks
section "the framework suite: each framework on hier and on Gloo (about 5 minutes)"
./tests/frameworks/run.sh
section "the wheel in an environment of its own"
./tests/wheel/check_wheel.sh 2>&1 | grep -v "Failed to initialize NumPy\|_conversion_method_template"

section "all tests passed"
