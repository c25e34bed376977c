#!/usr/bin/env bash
# The one install path, used by both README commands and by CI:
#   1. the Debian packages the build needs, when missing (apt-get, as root or through sudo);
#   2. a Python virtual environment with exactly the versions pinned in pyproject.toml, and the torch
#      release chosen (the newest supported unless HIER_TORCH says otherwise);
#   3. hier built with Meson in <checkout>/build (build-torch<release> for another torch release than
#      the newest) and installed into that environment as a wheel (meson-python). The build directory
#      persists, so a change rebuilds only what it touched, and a run with nothing changed skips the
#      step. (Not an editable install: that would rebuild inside every `import torch`, through the
#      entry point, and a broken build would break torch's import.)
#
#   HIER_TORCH   the torch version to install and build against: torch-newest in pyproject.toml's
#                [tool.hier] by default (2.15.0); any release from 2.11 to 2.15, e.g. HIER_TORCH=2.11.0.
#                A build is for one torch minor release, so another release than the newest gets an
#                environment and a build directory of its own: .venv-torch2.11 and build-torch2.11.
#   HIER_VENV    the environment to use or create (default: <checkout>/.venv, or .venv-torch<release>)
#   HIER_PYTHON  the interpreter that creates it (default: python3)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=packaging/env.sh
source "$root/packaging/env.sh"  # hier_torch, venv, build
python="${HIER_PYTHON:-python3}"

export PATH="$venv/bin:$PATH"  # meson-python runs meson and ninja from the environment
say() { printf '[install] %s\n' "$*" >&2; }

# 1. System packages: a C++20 compiler, CMake (it reads UCX's package config), pkg-config,
#    clang-format (the tests check the C++ layout), GoogleTest, iproute2 (network namespaces for the
#    multi-node tests), Python's venv module, Open MPI (the benchmark's anchor: mpicc builds
#    torch_hier/mpi_bench.c, mpirun runs it), and Debian's UCX headers (libucx-dev: the test command
#    builds the transport against the system's UCX too, -Ducx=system; hier's own build uses the wheel's).
missing=()
command -v g++ >/dev/null || missing+=(g++)
command -v cmake >/dev/null || missing+=(cmake)
command -v pkg-config >/dev/null || missing+=(pkg-config)
command -v clang-format >/dev/null || missing+=(clang-format)
[ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
command -v ip >/dev/null || missing+=(iproute2)
command -v mpicc >/dev/null && command -v mpirun >/dev/null || missing+=(openmpi-bin libopenmpi-dev)
[ -f /usr/include/ucp/api/ucp.h ] || missing+=(libucx-dev)
command -v "$python" >/dev/null || missing+=(python3)
if command -v "$python" >/dev/null && ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then missing+=(python3-venv); fi
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# 2. The Python environment and the pinned packages (pyproject.toml is the one place they are pinned;
#    its torch range becomes exactly $hier_torch).
"$python" - "$root/pyproject.toml" "$hier_torch" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    spec = next(d for d in tomllib.load(f)["project"]["dependencies"] if d.startswith("torch"))
clauses = dict((c[:2] if c[1] == "=" else c[:1], c.lstrip("<>=")) for c in spec[len("torch"):].split(","))
release = lambda v: tuple(int(x) for x in v.split(".")[:2])
lower, upper = release(clauses[">="]), release(clauses["<"])
wanted = sys.argv[2]
try:
    ok = lower <= release(wanted) < upper
except ValueError:
    ok = False
if not ok:
    sys.exit(f"[install] HIER_TORCH={wanted}: hier builds against torch {clauses['>=']} and later, below "
             f"{clauses['<']} (pyproject.toml: {spec}); choose a version in that range, e.g. HIER_TORCH=2.11.0")
PY
if [ ! -x "$venv/bin/python" ]; then
  say "creating the Python environment $venv"
  "$python" -m venv "$venv"
fi
requirements="$("$venv/bin/python" - "$root/pyproject.toml" "$hier_torch" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)
deps = [f"torch=={sys.argv[2]}" if d.startswith("torch") else d for d in project["project"]["dependencies"]]
pins = project["build-system"]["requires"] + deps
pins += project["project"]["optional-dependencies"]["test"]
print(" ".join(pins))
PY
)"
stamp="$venv/.hier-requirements"
if [ "$(cat "$stamp" 2>/dev/null)" != "$requirements" ]; then
  say "installing $requirements (torch brings its CUDA and NCCL wheels: a few GB the first time)"
  # Through uv (from PyPI, pinned here), which installs the same pins as pip in under a third of the time
  # (torch 2.11's set into a new environment: 25 s against pip's 83 s, two cores, nothing cached). Its
  # cache ($uv_cache, in the checkout, so on the environments' file system) is hard-linked into each
  # environment, not copied: torch's GBs are on disk once, however many environments share them.
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "uv==$uv_version"
  UV_CACHE_DIR="$uv_cache" "$venv/bin/uv" pip install -q --python "$venv/bin/python" --link-mode hardlink $requirements
  echo "$requirements" > "$stamp"
fi

# 3. Build and install, unless no source changed since the last install into this environment.
sources="$(cd "$root" && find meson.build meson_options.txt pyproject.toml transport plugin registry packaging tests \
             -type f ! -name '*.pyc' -printf '%p %T@ %s\n' | sort | sha1sum | cut -d' ' -f1)"
built="$venv/.hier-built"
if [ "$(cat "$built" 2>/dev/null)" != "$sources $root $build" ]; then
  [ -f "$build/build.ninja" ] || say "configuring and building hier for torch $hier_torch in $build (a few minutes on two cores)"
  # The GoogleTest suites (transport, CUDA path decisions) do not touch torch: the newest torch's build has
  # them, and a build for another release leaves them out.
  gtest=enabled; [ "$build" = "$root/build" ] || gtest=disabled
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps \
    -Cbuild-dir="$build" -Csetup-args=-Dtests=true -Csetup-args=-Dgtest=$gtest "$root"
  echo "$sources $root $build" > "$built"
fi
say "ready: $venv (torch $hier_torch, built in $build)"
