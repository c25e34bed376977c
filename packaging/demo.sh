#!/usr/bin/env bash
# The main job (README): installs what it needs (packaging/install.sh), then runs a 4-rank torchrun job
# on hier: every collective checked and timed beside Gloo, and a short DDP training run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/packaging/install.sh"
source "$root/packaging/env.sh"  # venv: the environment install.sh made (HIER_TORCH, HIER_VENV)
port="$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
export OMP_NUM_THREADS=1 UCX_WARN_UNUSED_ENV_VARS=n
exec "$venv/bin/torchrun" --nproc-per-node "${HIER_DEMO_RANKS:-4}" --master-port "$port" -m torch_hier.demo "$@"
