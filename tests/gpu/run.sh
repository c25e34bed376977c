#!/usr/bin/env bash
# The CUDA tests, for a CUDA machine. Works offline on a bare one: it needs python3 with a CUDA build of
# torch (2.11 to 2.15), meson, ninja, cmake and pytest; nothing is downloaded. What is missing comes
# from a folder of wheels: the UCX wheel, libucx-cu13 (fetch it on a machine with a network:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --platform manylinux_2_28_x86_64 -d wheels libucx-cu13==1.22.0
# with the target's Python version). It builds hier against the torch it finds, in build-gpu/, puts it
# with the wheels' contents in build-gpu/site (on PYTHONPATH, registered through its entry point as an
# installed hier would be), runs the NCCL gtests when GoogleTest was found and tests/gpu, and prints
# "N passed, N failed".
#
#   tests/gpu/run.sh [WHEEL_DIR]     WHEEL_DIR defaults to $HIER_WHEELS, then tests/gpu/wheels
#   HIER_PYTHON                      the interpreter with torch (default: python3)
#   extra arguments after --         go to pytest (e.g. -- -k stream)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$root/tests/gpu/build.sh"

# The tests.
passed=0 failed=0
export UCX_WARN_UNUSED_ENV_VARS=n
if [ -x "$build/tests/transport_tests" ]; then
  say "NCCL gtests"
  if "$build/tests/transport_tests" --gtest_filter='Nccl*' | tee "$build/gtest.log"; then :; fi
  passed=$((passed + $(grep -c '^\[       OK \]' "$build/gtest.log" || true)))
  failed=$((failed + $(grep -c '^\[  FAILED  \] [A-Z]' "$build/gtest.log" || true)))
else
  say "no GoogleTest here: the NCCL gtests were not built"
fi
say "pytest tests/gpu"
"$python" -m pytest tests/gpu -v -rs -p no:cacheprovider "$@" | tee "$build/pytest.log" || true
summary="$(tail -1 "$build/pytest.log")"
count() { grep -oE "[0-9]+ $1" <<<"$summary" | grep -oE '^[0-9]+' || echo 0; }
passed=$((passed + $(count passed)))
failed=$((failed + $(count failed) + $(count 'errors?')))
[ -n "$(grep -oE '[0-9]+ (passed|failed|skipped)' <<<"$summary")" ] || failed=$((failed + 1))  # pytest did not finish
echo "$passed passed, $failed failed ($(count skipped) skipped)"
[ "$failed" -eq 0 ]
