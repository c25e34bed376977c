#!/usr/bin/env bash
# The wheel that `pip install --no-build-isolation .` builds works in another environment that has only
# the torch it was built against and the pinned UCX wheel: it installs there with no index to fetch from
# (its dependencies must be met by what is there), it loads, `import torch` registers "hier" through the
# entry point, and a 2-rank job runs. Reuses the build directory (no full rebuild).
#
# The other environment's site-packages holds every file of the wheel's run-time dependencies and theirs
# (torch, its CUDA wheels, UCX...), and nothing else, as symbolic links to the files in $venv: a second
# copy would take another 6 GB of disk, which a CI machine may not have (a run failed so, writing it).
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

rm -rf "$other"
python3 -m venv --without-pip "$other"  # pip and setuptools come from $venv, or not at all
site="$("$other/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
# The package's dependencies, its torch range narrowed to the release the wheel was built for, and
# everything they require in turn (with the extras asked for: torch asks for cuda-toolkit[cublas,...]),
# linked from $venv.
"$venv/bin/python" - "$root/pyproject.toml" "$hier_torch" "$site" <<'PY'
import importlib.metadata as metadata, os, sys, tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pyproject, torch_version, site = sys.argv[1:]
with open(pyproject, "rb") as f:
    wanted = [f"torch=={torch_version}" if d.startswith("torch") else d
              for d in tomllib.load(f)["project"]["dependencies"]]
linked, followed = set(), set()  # distributions; (distribution, extra) whose requirements are queued
while wanted:
    requirement = Requirement(wanted.pop())
    name = canonicalize_name(requirement.name)
    dist = metadata.distribution(name)
    if name not in linked:
        if not requirement.specifier.contains(dist.version, prereleases=True):
            sys.exit(f"check_wheel: {dist.name} {dist.version} in {sys.prefix} does not meet {requirement}")
        for file in dist.files:
            if file.parts[0] == "..":  # scripts in bin/: not needed to import
                continue
            target = os.path.join(site, file)
            if not os.path.lexists(target):
                os.makedirs(os.path.dirname(target), exist_ok=True)
                os.symlink(dist.locate_file(file), target)
        linked.add(name)
    for extra in {""} | requirement.extras:
        if (name, extra) not in followed:
            followed.add((name, extra))
            wanted += [r for r in dist.requires or []
                       if not Requirement(r).marker or Requirement(r).marker.evaluate({"extra": extra})]
print(f"linked {len(linked)} distributions from {sys.prefix}: the wheel's run-time closure")
PY
"$venv/bin/python" -m pip --python "$other/bin/python" install -q --disable-pip-version-check --no-index "$wheel"

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
