#!/usr/bin/env bash
# How long a CUDA collective holds the calling thread (tests/gpu/call_hold.py), hier beside
# ProcessGroupNCCL, 2 ranks on one host, for a CUDA machine; offline, built as tests/gpu/run.sh builds.
# Runs twice: as configured (hier's communicators non-blocking) and with NCCL_COMM_BLOCKING=1. With one
# GPU the ranks share it, each with its own NCCL_HOSTID, so NCCL talks between them over loopback sockets.
# Writes bench-results/hold-default.json and hold-blocking.json.
#
#   tests/gpu/hold.sh [WHEEL_DIR] [-- call_hold.py arguments]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$root/tests/gpu/build.sh"

gpus="$("$python" -c 'import torch; print(torch.cuda.device_count())')"
export UCX_WARN_UNUSED_ENV_VARS=n OMP_NUM_THREADS=1
rank_env='if [ "$SHARE_GPUS" = 1 ]; then
  export NCCL_HOSTID=nccl-host-$LOCAL_RANK NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1
fi
exec "$0" "$@"'
mkdir -p bench-results
for mode in default blocking; do
  say "hold, $mode communicators"
  (
    [ "$mode" = blocking ] && export NCCL_COMM_BLOCKING=1
    SHARE_GPUS=$((gpus < 2 ? 1 : 0)) "$python" -m torch.distributed.run --nproc-per-node 2 --no-python \
      bash -c "$rank_env" "$python" "$root/tests/gpu/call_hold.py" --json "bench-results/hold-$mode.json" "$@"
  )
done
