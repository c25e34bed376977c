#!/usr/bin/env bash
# The framework suite: Lightning (Trainer and Fabric), Accelerate, torchft, DCP, DTensor and pipelining, each
# run on hier and on Gloo with the same seeds (test_frameworks.py). The frameworks come from PyPI, pinned in
# pyproject.toml's `frameworks` extra, into an environment of their own ($build/frameworks-env) beside
# torch, the test pins and hier's wheel (built from the build directory, as tests/wheel does): they bring
# their own dependencies, which must not change the main environment's. torch's files are hard links from
# uv's cache, not another copy. Pass pytest arguments through (e.g. -k torchft).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$root/packaging/env.sh"  # hier_torch, venv, build, uv_cache (HIER_TORCH, HIER_VENV)
"$root/packaging/install.sh"
env="$build/frameworks-env"
wheels="$build/frameworks-wheel"

rm -rf "$wheels"
PATH="$venv/bin:$PATH" "$venv/bin/python" -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
  -Cbuild-dir="$build" -Csetup-args=-Dtests=true -w "$wheels" "$root"
requirements="$("$venv/bin/python" - "$root/pyproject.toml" "$hier_torch" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)
deps = [f"torch=={sys.argv[2]}" if d.startswith("torch") else d for d in project["project"]["dependencies"]]
extras = project["project"]["optional-dependencies"]
print(" ".join(deps + extras["test"] + extras["frameworks"]))
PY
)"
stamp="$env/.hier-requirements"
if [ "$(cat "$stamp" 2>/dev/null)" != "$requirements" ]; then
  rm -rf "$env"
  "$venv/bin/uv" venv -q --python "$venv/bin/python" "$env"
  UV_CACHE_DIR="$uv_cache" "$venv/bin/uv" pip install -q --python "$env/bin/python" --link-mode hardlink $requirements
  echo "$requirements" > "$stamp"
fi
UV_CACHE_DIR="$uv_cache" "$venv/bin/uv" pip install -q --python "$env/bin/python" --no-deps --reinstall \
  "$wheels"/torch_hier-*.whl

cd "$root/tests/frameworks"  # not the checkout's root: hier comes from the environment, not packaging/
"$env/bin/python" -m pytest -q -rs -p no:cacheprovider "$@" .
