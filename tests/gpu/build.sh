# Sourced by tests/gpu/run.sh and tests/gpu/bench.sh, with `root` (the checkout) set and their own
# arguments: takes a leading WHEEL_DIR (default $HIER_WHEELS, then tests/gpu/wheels) and a `--`, leaving
# the rest in "$@"; the interpreter with a CUDA torch is $HIER_PYTHON (default python3). Builds hier
# against that torch in build-gpu/ and lays it out with the wheels' contents in build-gpu/site, on
# PYTHONPATH and registered through its entry point as an installed hier would be. Works offline;
# nothing is downloaded.
cd "$root"
wheels="${HIER_WHEELS:-$root/tests/gpu/wheels}"
if [ $# -gt 0 ] && [ "$1" != "--" ]; then wheels="$1"; shift; fi
[ "${1:-}" = "--" ] && shift
python="${HIER_PYTHON:-python3}"
build="$root/build-gpu"
site="$build/site"
say() { printf '[gpu] %s\n' "$*" >&2; }

"$python" - <<'PY'
import torch
print(f"[gpu] torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"{torch.cuda.device_count()} GPU(s): {[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}")
assert torch.version.cuda, "this torch is not a CUDA build"
PY

# 1. What is missing, from the wheels (no index, no network), into build-gpu/site.
mkdir -p "$site"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
if ! "$python" -c 'import libucx' 2>/dev/null; then
  shopt -s nullglob
  ucx_wheels=("$wheels"/libucx_cu13-*.whl)
  [ ${#ucx_wheels[@]} -gt 0 ] || { say "no libucx_cu13-*.whl in $wheels (see the header of tests/gpu/run.sh)"; exit 2; }
  say "installing ${ucx_wheels[*]##*/} into $site"
  "$python" -m pip install -q --no-index --no-deps --no-compile --target "$site" "${ucx_wheels[@]}"
fi
for tool in meson ninja cmake; do command -v "$tool" >/dev/null || { say "$tool is missing"; exit 2; }; done

# 2. Build against the torch found, with its CUDA runtime and NCCL.
if [ ! -f "$build/build.ninja" ]; then
  say "configuring $build"
  mkdir -p "$build"
  printf "[binaries]\npython = '%s'\n" "$(command -v "$python")" >"$build.native.ini"
  meson setup "$build" --buildtype=release -Dcuda=enabled --native-file "$build.native.ini"
fi
say "building (ninja -C $build)"
ninja -C "$build" >"$build/ninja.log" 2>&1 || { tail -50 "$build/ninja.log"; exit 2; }

# 3. The package as an installed wheel lays it out (meson install into a staging folder), beside libucx/
#    in build-gpu/site, with its entry points, so that `import torch` registers the backend.
rm -rf "$build/staging" "$site/torch_hier" "$site/_torch_hier_autoload.py" "$site"/torch_hier-*.dist-info
meson install -C "$build" --destdir "$build/staging" --quiet
installed="$(dirname "$(find "$build/staging" -name _torch_hier_autoload.py | head -1)")"
cp -r "$installed"/. "$site"/
mkdir -p "$site/torch_hier-0.1.0.dist-info"
printf 'Metadata-Version: 2.1\nName: torch-hier\nVersion: 0.1.0\n' >"$site/torch_hier-0.1.0.dist-info/METADATA"
"$python" - "$root/pyproject.toml" "$site/torch_hier-0.1.0.dist-info/entry_points.txt" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    groups = tomllib.load(f)["project"]["entry-points"]
with open(sys.argv[2], "w") as out:
    for group, entries in groups.items():
        out.write(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()) + "\n")
PY
"$python" -c 'import torch_hier; print("[gpu] hier", torch_hier.info())'

