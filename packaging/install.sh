#!/usr/bin/env bash
# The one install path, used by both README commands and by CI:
#   1. the Debian packages the build needs, when missing (apt-get, as root or through sudo);
#   2. a Python virtual environment with exactly the versions pinned in pyproject.toml;
#   3. hier built with Meson in <checkout>/build and installed into that environment as a wheel
#      (meson-python). The build directory persists, so a change rebuilds only what it touched, and a
#      run with nothing changed skips the step. (Not an editable install: that would rebuild inside
#      every `import torch`, through the entry point, and a broken build would break torch's import.)
#
#   HIER_VENV    the environment to use or create (default: <checkout>/.venv)
#   HIER_PYTHON  the interpreter that creates it (default: python3)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${HIER_VENV:-$root/.venv}"
python="${HIER_PYTHON:-python3}"

export PATH="$venv/bin:$PATH"  # meson-python runs meson and ninja from the environment
say() { printf '[install] %s\n' "$*" >&2; }

# 1. System packages: a C++20 compiler, CMake (it reads UCX's package config), pkg-config,
#    GoogleTest, iproute2 (network namespaces for the multi-node tests), Python's venv module.
missing=()
command -v g++ >/dev/null || missing+=(g++)
command -v cmake >/dev/null || missing+=(cmake)
command -v pkg-config >/dev/null || missing+=(pkg-config)
[ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
command -v ip >/dev/null || missing+=(iproute2)
command -v "$python" >/dev/null || missing+=(python3)
if command -v "$python" >/dev/null && ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then missing+=(python3-venv); fi
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# 2. The Python environment and the pinned packages (pyproject.toml is the one place they are pinned).
if [ ! -x "$venv/bin/python" ]; then
  say "creating the Python environment $venv"
  "$python" -m venv "$venv"
fi
requirements="$("$venv/bin/python" - "$root/pyproject.toml" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)
pins = project["build-system"]["requires"] + project["project"]["dependencies"]
pins += project["project"]["optional-dependencies"]["test"]
print(" ".join(pins))
PY
)"
stamp="$venv/.hier-requirements"
if [ "$(cat "$stamp" 2>/dev/null)" != "$requirements" ]; then
  say "installing $requirements (torch brings its CUDA and NCCL wheels: a few GB the first time)"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check $requirements
  echo "$requirements" > "$stamp"
fi

# 3. Build and install, unless no source changed since the last install into this environment.
sources="$(cd "$root" && find meson.build meson_options.txt pyproject.toml transport plugin registry packaging tests \
             -type f ! -name '*.pyc' -printf '%p %T@ %s\n' | sort | sha1sum | cut -d' ' -f1)"
built="$venv/.hier-built"
if [ "$(cat "$built" 2>/dev/null)" != "$sources $root" ]; then
  [ -f "$root/build/build.ninja" ] || say "configuring and building hier (a few minutes on two cores)"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps \
    -Cbuild-dir="$root/build" -Csetup-args=-Dtests=true "$root"
  echo "$sources $root" > "$built"
fi
say "ready: $venv"
