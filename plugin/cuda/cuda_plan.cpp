#include "plugin/cuda/cuda_plan.hpp"

#include <algorithm>

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

SplitPlan splitOf(const Topology& parent, const std::vector<int>& members) {
  std::vector<std::string> hosts;
  int childRank = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    hosts.push_back(std::to_string(parent.nodeOf.at(size_t(members[i]))));
    if (members[i] == parent.rank) childRank = int(i);
  }
  if (childRank < 0) return SplitPlan{};
  // One color a child (split_group makes several at once: each rank passes its own child's members),
  // its first member: the parent's communicator is the whole parent on one host (then the child is on
  // that host too), or the parent's ranks on this host (then its members of the child are the child's
  // ranks here). The key is the place the child's own plan gives this rank.
  const NcclCommunicator plan = ncclCommunicator(Topology::fromHosts(hosts, childRank), 0);
  return SplitPlan{*std::min_element(members.begin(), members.end()), plan.rank, plan.size};
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
