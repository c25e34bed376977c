#!/usr/bin/env bash
# The wheel that `pip install --no-build-isolation .` builds works in another environment that has only
# the torch it was built against and the pinned UCX wheel: it loads, `import torch` registers "hier"
# through the entry point, and a 2-rank job runs. Reuses the build directory (no full rebuild) and keeps
# the second environment for next time.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$root/packaging/env.sh"  # hier_torch, venv, build (HIER_TORCH, HIER_VENV)
other="$build/wheel-env"
wheels="$build/wheels"

rm -rf "$wheels"
PATH="$venv/bin:$PATH" "$venv/bin/python" -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
  -Cbuild-dir="$build" -Csetup-args=-Dtests=true -w "$wheels" "$root"
wheel="$(ls "$wheels"/torch_hier-*.whl)"
echo "built $(basename "$wheel")"

[ -x "$other/bin/python" ] || python3 -m venv "$other"
# The package's dependencies, its torch range narrowed to the release the wheel was built for.
runtime="$("$other/bin/python" -c 'import sys, tomllib; print(" ".join(f"torch=={sys.argv[2]}" if d.startswith("torch") else d for d in tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))' "$root/pyproject.toml" "$hier_torch")"
if [ "$(cat "$other/.pins" 2>/dev/null)" != "$runtime" ]; then
  "$other/bin/python" -m pip install -q --disable-pip-version-check $runtime
  echo "$runtime" > "$other/.pins"
fi
"$other/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"

cd "$other"  # not the checkout: nothing may come from the source tree
"$other/bin/python" - <<'PY'
import os, socket, sys, subprocess
script = r'''
import sys, torch, torch.distributed as dist
rank = int(sys.argv[1])
dist.init_process_group("hier", init_method=sys.argv[2], rank=rank, world_size=2)
t = torch.full((1 << 20,), float(rank + 1))
dist.all_reduce(t)
assert torch.all(t == 3), t[0]
dist.destroy_process_group()
print("rank", rank, "ok", flush=True)
'''
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
init = f"tcp://127.0.0.1:{port}"
env = dict(os.environ, UCX_WARN_UNUSED_ENV_VARS="n")
procs = [subprocess.Popen([sys.executable, "-c", script, str(r), init], env=env) for r in range(2)]
codes = [p.wait(timeout=120) for p in procs]
import torch_hier
assert os.path.dirname(torch_hier.__file__).startswith(sys.prefix), torch_hier.__file__
assert codes == [0, 0], codes
print("the wheel works in a separate environment:", torch_hier.__file__)
PY
