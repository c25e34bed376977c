#!/usr/bin/env bash
# torch_hier.bench on CUDA tensors, hier beside ProcessGroupNCCL on the same ranks, for a CUDA machine;
# offline, built as tests/gpu/run.sh builds (same wheels, same build-gpu/). Three layouts of simulated
# hosts (HIER_HOST_ID), each a torchrun job:
#   one-host   2 ranks on one host: hier runs NCCL itself, so this measures what hier adds to NCCL;
#   2x1        2 hosts of one rank: hier stages through pinned host memory and UCX;
#   2x2        2 hosts of 2 ranks: NCCL inside each host, UCX between them.
# With fewer GPUs than ranks the ranks share them, each with its own NCCL_HOSTID (NCCL refuses two ranks of
# one communicator on one GPU otherwise); NCCL then talks between them over loopback sockets, as it
# would between hosts, so the nccl column is NCCL's socket transport, not NVLink.
# Writes bench-results/gpu-<layout>.json and .png.
#
#   tests/gpu/bench.sh [WHEEL_DIR] [-- torch_hier.bench arguments]   (default: the five card ops, 1K-64M)
#   HIER_GPU_LAYOUTS                 the layouts to run (default: "one-host 2x1", and 2x2 with 4 GPUs or
#                                    more: 4 ranks sharing one GPU over NCCL's sockets take about 14 ms
#                                    for a 1 KiB allreduce, so the layout alone runs past 10 minutes)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$root/tests/gpu/build.sh"

[ $# -gt 0 ] || set -- --ops allreduce allgather reduce_scatter alltoall broadcast \
  --min-bytes 1K --max-bytes 64M --factor 4
gpus="$("$python" -c 'import torch; print(torch.cuda.device_count())')"
export UCX_WARN_UNUSED_ENV_VARS=n OMP_NUM_THREADS=1
# Each rank's environment, set where torchrun has given it LOCAL_RANK.
rank_env='export HIER_HOST_ID=host-$((LOCAL_RANK / RANKS_PER_HOST))
if [ "$SHARE_GPUS" = 1 ]; then
  export NCCL_HOSTID=nccl-host-$LOCAL_RANK NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1
fi
exec "$0" -m torch_hier.bench "$@"'
mkdir -p bench-results
status=0
default_layouts="one-host 2x1"
[ "$gpus" -ge 4 ] && default_layouts="$default_layouts 2x2"
for layout in ${HIER_GPU_LAYOUTS:-$default_layouts}; do
  case "$layout" in
    one-host) ranks=2 per_host=2 ;;
    2x1) ranks=2 per_host=1 ;;
    2x2) ranks=4 per_host=2 ;;
    *) say "unknown layout $layout (one-host, 2x1 or 2x2)"; exit 2 ;;
  esac
  say "layout $layout: $ranks ranks, $per_host a host, $gpus GPU(s)"
  RANKS_PER_HOST=$per_host SHARE_GPUS=$((gpus < ranks ? 1 : 0)) \
    "$python" -m torch.distributed.run --nproc-per-node "$ranks" --no-python bash -c "$rank_env" "$python" \
    --device cuda --json "bench-results/gpu-$layout.json" --plot "bench-results/gpu-$layout.png" "$@" || status=1
done
exit $status
