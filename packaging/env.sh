# Sourced (with $root set to the checkout) by install.sh, demo.sh and the test scripts: which torch they
# are for, and its Python environment and build directory. A build of hier is for one torch minor release,
# so each release gets an environment and a build directory of its own.
#
#   HIER_TORCH  the torch version to install and build against (default: torch-newest in pyproject.toml's
#               [tool.hier]; anything from 2.11 to 2.15, e.g. HIER_TORCH=2.11.0)
#   HIER_VENV   the environment (default: <checkout>/.venv for the newest torch's release,
#               <checkout>/.venv-torch<major.minor> for another)
# Sets: hier_torch (the version), hier_torch_oldest (torch-oldest in [tool.hier]), venv, build
# (<checkout>/build, or <checkout>/build-torch<major.minor> for a release other than the newest), and
# uv_version and uv_cache (the installer install.sh uses and its cache: <checkout>/.uv-cache).
hier_pin() { sed -n "s/^$1 *= *\"\\(.*\\)\"/\\1/p" "$root/pyproject.toml"; }
hier_torch_newest="$(hier_pin torch-newest)"
hier_torch_oldest="$(hier_pin torch-oldest)"
hier_torch="${HIER_TORCH:-$hier_torch_newest}"
hier_release="$(echo "$hier_torch" | cut -d. -f1,2)"
if [ "$hier_release" = "$(echo "$hier_torch_newest" | cut -d. -f1,2)" ]; then
  venv="${HIER_VENV:-$root/.venv}"
  build="$root/build"
else
  venv="${HIER_VENV:-$root/.venv-torch$hier_release}"
  build="$root/build-torch$hier_release"
fi
uv_version=0.13.9
uv_cache="$root/.uv-cache"
