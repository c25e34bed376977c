#include "transport/hierarchy/host_node_steps.h"

#include <algorithm>
#include <cstring>

#include "transport/base/error.h"
#include "transport/flat/flat.h"

namespace hier::transport::hierarchy {
namespace {

ReduceOp hostOp(const Reduction& how) {
  // scalesContributions() is false: the schedules never ask the host to scale.
  if (how.scale) throw Error(ErrorKind::Internal, "a host node step was asked to scale its contributions");
  return how.op;
}

}  // namespace

HostNodeSteps::HostNodeSteps(Collective& c) : c_(c), node_(c.group().node(c.deadline())) {}

void HostNodeSteps::reduceScatter(const std::vector<Buffer>& inputs, const Buffer& output, const Reduction& how) {
  Collective step(node_, c_);
  flat::reduceScatter(step, inputs, output, hostOp(how));
}

void HostNodeSteps::allgather(const std::vector<Buffer>& parts) {
  Collective step(node_, c_);
  flat::allgather(step, parts[size_t(node_.rank())], parts);
}

void HostNodeSteps::reduce(const Buffer& input, const Buffer& output, const Reduction& how, int root) {
  Collective step(node_, c_);
  flat::reduce(step, input, output, hostOp(how), root);
}

void HostNodeSteps::broadcast(const Buffer& data, int root) {
  Collective step(node_, c_);
  flat::broadcast(step, data, root);
}

Buffer HostNodeSteps::scratch(size_t count, DataType dtype) {
  return Buffer{c_.scratch(std::max<size_t>(count * elementSize(dtype), 1)), count, dtype, MemoryType::Host};
}

void HostNodeSteps::copy(const Buffer& to, const Buffer& from) {
  if (to.data != from.data) std::memcpy(to.data, from.data, from.bytes());
}

}  // namespace hier::transport::hierarchy
