#!/usr/bin/env bash
# The transport's GoogleTest suite (tests/transport_tests) under AddressSanitizer + UndefinedBehaviorSanitizer
# and under ThreadSanitizer, each in a build directory of its own (build-asan/, build-tsan/: Meson's
# b_sanitize; -O1 with line tables only, asserts on), then part of the Python suite on the torch plugin
# built with ASan + UBSan (below). Each transport run has the same four variants as tests/meson.build's
# test() entries: the suite, the suite with every collective on UCX (HIER_SHM_MIN_BYTES=1G), the
# Staging* schedules in 4K fragments, and every algorithm of every table forced in 4K fragments. The
# whole suite runs under TSan too (under two minutes a variant on two cores): no subset is needed.
#
# Any sanitizer report fails the run: every sanitizer halts on its first report, in the gtest process and
# in the ranks it forks (tests/transport/multiprocess.cpp), and a rank that dies so fails its test ("exit
# code 1" for ASan and UBSan, 66 for TSan; the report is in the log).
#
# UCX is not instrumented. Two UCX settings keep it working under the sanitizers, both outside hier:
#   UCX_TLS=^cma        UCX probes CMA reachability with a process_vm_readv call that fails by design; the
#                       sanitizers' interceptor (GCC 12's libsanitizer) then reads its -1 return as a length:
#                       a false "negative-size-param" under ASan, a crash inside TSan. Shared memory still
#                       goes through UCX's posix/sysv transports and hier's own arena.
#   UCX_MEM_EVENTS=no   (TSan only) UCX's memory hooks, which patch mmap/munmap, crash the ranks under
#                       TSan's own interceptors (SIGSEGV at the first endpoint).
# TSan suppressions, each with its reason, are in tests/sanitizers/suppressions-tsan.txt; hier's own code is
# never suppressed (fix it).
#
# python: part of the Python suite (real multi-process torch jobs) on the torch plugin built with ASan+UBSan
# in build-asan/: the package assembled in build-asan/python/torch_hier from packaging/torch_hier and that
# build's libraries, first on PYTHONPATH; the sanitizer runtimes preloaded into every Python process (the
# interpreter and torch are not instrumented, they only get ASan's allocator, so a stray write by hier into
# memory torch handed it is caught too). Leak detection is off there: the interpreter and torch keep memory to
# the end by design. Each process that has a report writes it to build-asan/python-reports.<pid>; any such
# file fails the run, beside the test that then fails (the rank dies). Not under TSan: the interpreter and
# torch's threads are not instrumented, so TSan cannot see their synchronisation and reports races that are
# not there.
#
#   tests/sanitizers/run.sh [asan|tsan|python]...    all three when none is named
#   HIER_SANITIZER_JOBS                       ninja's parallelism (default: 2)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
# shellcheck source=packaging/env.sh
source "$root/packaging/env.sh"  # venv (Meson and the torch the configure step probes)
[ -x "$venv/bin/meson" ] || "$root/packaging/install.sh"
export PATH="$venv/bin:$PATH"
jobs="${HIER_SANITIZER_JOBS:-2}"
say() { printf '[sanitizers] %s\n' "$*" >&2; }

export UCX_WARN_UNUSED_ENV_VARS=n UCX_TLS=^cma
export ASAN_OPTIONS=halt_on_error=1:print_stacktrace=1:detect_leaks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:second_deadlock_stack=1:suppressions=$root/tests/sanitizers/suppressions-tsan.txt"

# build <name> <b_sanitize>: configures build-<name> if needed and builds the transport tests in it.
build() {
  local dir="$root/build-$1"
  if [ ! -f "$dir/build.ninja" ]; then
    say "configuring $dir (-Db_sanitize=$2)"
    # As packaging/install.sh configures build/ (-Dtests=true -Dgtest=enabled), with the sanitizer; no CUDA
    # path (the CUDA runtime under ASan needs settings of its own, and the CUDA tests need a GPU: tests/gpu).
    # -O1 and -g1 (line tables: a report still names every function, file and line) compile in half the
    # time of -O2 -g under the sanitizers (29 s against 14 s for tests/transport/test_collectives.cpp, 58 s
    # against 28 s for plugin/process_group_calls.cpp, on two cores), and -O1 is what the sanitizers' documentation
    # recommends. (Meson adds -fno-omit-frame-pointer with b_sanitize.)
    local setup_log; setup_log="$(mktemp)"
    meson setup "$dir" -Doptimization=1 -Ddebug=false -Db_ndebug=false -Dc_args=-g1 -Dcpp_args=-g1 \
      -Db_sanitize="$2" -Dtests=true -Dgtest=enabled -Dcuda=disabled >"$setup_log" 2>&1 ||
      { cat "$setup_log"; rm -f "$setup_log"; return 1; }
    rm -f "$setup_log"
  fi
  local log="$dir/sanitizers-build.log"
  ninja -C "$dir" -j "$jobs" tests/transport_tests >"$log" 2>&1 || { tail -50 "$log"; return 1; }
}

# suite <name> <label> <gtest filter> [VAR=value...]: one variant, its log in build-<name>/; fails when it does.
failed=0
suite() {
  local name="$1" label="$2" filter="$3"; shift 3
  local log="$root/build-$name/sanitizers-$label.log" start=$SECONDS
  if env "$@" timeout 900 "$root/build-$name/tests/transport_tests" --gtest_filter="$filter" >"$log" 2>&1; then
    printf '  %-5s %-22s %s (%d s)\n' "$name" "$label" "$(grep -o 'PASSED.*' "$log" | tail -1)" \
      $((SECONDS - start))
  else
    printf '  %-5s %-22s FAILED (%d s); the whole log is %s\n' "$name" "$label" $((SECONDS - start)) "$log"
    grep -E -A30 '^(==[0-9]+==ERROR|WARNING: ThreadSanitizer|SUMMARY: )|runtime error:' "$log" | head -120 || true
    grep -E '^\[  FAILED  \]|Which is:' "$log" | head -40 || true
    return 1
  fi
}

variants() {  # <name> [VAR=value...]: the four variants of tests/meson.build, with that environment
  local name="$1"; shift
  # Two at a time, as `meson test` runs them on two cores: much of a variant is waiting (its failure tests
  # wait out about 19 s of deadlines; its ranks wait on each other), which the other's ranks fill. Under
  # TSan the two long variants take 105 s side by side where they took 171 s one after the other (83 + 88
  # in a CI run); under ASan, 46 s against 85. Each one's lines are printed whole, in order, at the end.
  local out="$root/build-$name/sanitizers-variants" first second
  suite "$name" all '-Staging*' "$@" >"$out.1" 2>&1 & first=$!
  suite "$name" ucx-only '-Staging*' HIER_SHM_MIN_BYTES=1G "$@" >"$out.2" 2>&1 & second=$!
  wait "$first" || failed=1
  wait "$second" || failed=1
  suite "$name" staged-4K 'Staging*' HIER_HIERARCHY_FRAGMENT_BYTES=4K "$@" >"$out.3" 2>&1 & first=$!
  suite "$name" algorithms-4K 'Layouts/ForcedAlgorithms*' HIER_HIERARCHY_FRAGMENT_BYTES=4K "$@" >"$out.4" 2>&1 &
  second=$!
  wait "$first" || failed=1
  wait "$second" || failed=1
  cat "$out".[1-4]
  rm -f "$out".[1-4]
}

# The Python files run under ASan: every collective, dtype and reduce op on 1 to 5 ranks, the bad-input
# sweep, failure and recovery, Work and the functional collectives.
python_files=(tests/python/test_collectives.py tests/python/test_errors.py tests/python/test_recovery.py
  tests/python/test_work.py tests/python/test_functional.py)

python_suite() {
  local dir="$root/build-asan" start=$SECONDS
  local log="$dir/sanitizers-build.log" package="$dir/python/torch_hier"
  ninja -C "$dir" -j "$jobs" plugin/libtorch_hier.so "plugin/_C$("$venv/bin/python" -c \
    'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')" >"$log" 2>&1 || { tail -50 "$log"; return 1; }
  say "built the torch plugin in build-asan in $((SECONDS - start)) s"
  rm -rf "$dir/python" "$dir"/python-reports.*
  mkdir -p "$package"
  cp "$root"/packaging/torch_hier/*.py "$dir/packaging/_build_info.py" "$dir"/plugin/*.so "$package/"
  local preload; preload="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
  log="$dir/sanitizers-python.log"
  start=$SECONDS
  if PYTHONPATH="$dir/python" LD_PRELOAD="$preload" \
      ASAN_OPTIONS="halt_on_error=1:print_stacktrace=1:detect_leaks=0:log_path=$dir/python-reports" \
      UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$dir/python-reports" \
      timeout 1800 "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider "${python_files[@]}" >"$log" 2>&1 &&
      ! compgen -G "$dir/python-reports.*" >/dev/null; then
    printf '  %-5s %-22s %s (%d s)\n' asan python "$(tail -1 "$log" | tr -d =)" $((SECONDS - start))
  else
    printf '  %-5s %-22s FAILED (%d s); the whole log is %s\n' asan python $((SECONDS - start)) "$log"
    tail -40 "$log"
    for report in "$dir"/python-reports.*; do [ -f "$report" ] && head -60 "$report"; done
    failed=1
  fi
}

wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(asan tsan python)
for name in "${wanted[@]}"; do
  start=$SECONDS
  case "$name" in
    asan) build asan address,undefined; say "built build-asan in $((SECONDS - start)) s"; variants asan ;;
    tsan) build tsan thread; say "built build-tsan in $((SECONDS - start)) s"
          variants tsan UCX_MEM_EVENTS=no ;;
    python) build asan address,undefined; python_suite ;;
    *) say "unknown sanitizer run '$name' (asan, tsan or python)"; exit 2 ;;
  esac
done
[ "$failed" -eq 0 ] || { say "sanitizer reports or failures above"; exit 1; }
say "clean: ${wanted[*]}"
