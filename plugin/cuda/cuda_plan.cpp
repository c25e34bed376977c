#include "plugin/cuda/cuda_plan.hpp"

namespace hier::cuda_plan {

using transport::Topology;

NcclCommunicator ncclCommunicator(const Topology& t, int ordinal) {
  NcclCommunicator plan;
  if (t.nodeCount() == 1) {
    plan.key = "nccl/group/" + std::to_string(ordinal) + "/";
    plan.rank = t.rank;
    plan.size = t.size();
    for (int r = 0; r < t.size(); ++r) plan.ranks.push_back(r);
    return plan;
  }
  plan.key = "nccl/node/" + std::to_string(t.node()) + "/" + std::to_string(ordinal) + "/";
  plan.rank = t.localRank();
  plan.size = t.localSize();
  plan.ranks = t.nodes[size_t(t.node())];
  return plan;
}

int barrierDevice(int named, int bound, int visible) {
  if (visible <= 0) return -1;
  return named >= 0 ? named : bound;
}

int networkDeviceGpu(int current, int visible, int localRank) {
  if (visible <= 0) return -1;
  if (visible == 1 || current != 0) return current < visible ? current : 0;
  return localRank >= 0 ? localRank % visible : 0;
}

bool failsGroup(transport::ErrorKind kind, bool ncclAborted) {
  return ncclAborted || kind != transport::ErrorKind::InvalidUsage;
}

}  // namespace hier::cuda_plan
