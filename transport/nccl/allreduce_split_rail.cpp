#include "transport/nccl/allreduce_split_rail.h"

#include <algorithm>
#include <vector>

#include "transport/algorithms/algorithms.h"
#include "transport/collectives.h"
#include "transport/hierarchy/pipeline.h"
#include "transport/nccl/device_staging.h"
#include "transport/reduce.h"

namespace hier::transport::nccl {
namespace {

// One pinned slot holds the largest part of any fragment.
size_t slotBytes(const std::vector<std::vector<algorithms::Range>>& parts, DataType dtype) {
  size_t largest = 0;
  for (const auto& fragment : parts) largest = std::max(largest, fragment.front().count);
  return std::max<size_t>(largest * elementSize(dtype), 1);
}

}  // namespace

size_t splitRailPinnedBytes(size_t count, DataType dtype, int localSize) {
  return 2 * slotBytes(hierarchy::fragmentParts(count, elementSize(dtype), localSize), dtype);
}

void allreduceSplitRail(Collective& c, Communicator& node, const DeviceAllreduce& a, cudaStream_t stream,
                        void* pinned) {
  const shm::NodeArena::Deadline deadline{c.deadline(), c.timeout()};
  transport::Communicator& rail = c.communicator().railCommunicator(deadline);
  const ReduceOp sum = a.op == ReduceOp::Avg || a.premultiply ? ReduceOp::Sum : a.op;
  const size_t elementBytes = elementSize(a.dtype);
  const size_t me = size_t(node.rank());
  const auto parts = hierarchy::fragmentParts(a.count, elementBytes, node.size());
  const size_t slot = slotBytes(parts, a.dtype);
  char* const device = static_cast<char*>(a.data);
  auto slotOf = [&](size_t f) { return static_cast<char*>(pinned) + (f % 2) * slot; };
  auto counts = [&](size_t f) {
    std::vector<size_t> n;
    for (const auto& part : parts[f]) n.push_back(part.count);
    return n;
  };
  Event copied[2];  // fragment f's part reached slot f % 2

  hierarchy::runCollectNetworkSpread(
      parts.size(),
      [&](size_t f) {
        const auto& mine = parts[f][me];
        node.reduceScatterParts(device + parts[f].front().offset * elementBytes, counts(f), a.dtype, sum, stream);
        copyToHost(slotOf(f), device + mine.offset * elementBytes, mine.count * elementBytes, stream);
        copied[f % 2].record(stream);
      },
      [&](size_t f) {
        node.waitFor(copied[f % 2].get(), {c.deadline(), c.timeout()});
        const Buffer mine{slotOf(f), parts[f][me].count, a.dtype, MemoryType::Host};
        Collective step(rail, c);
        transport::allreduce(step, mine, sum);
        if (a.op == ReduceOp::Avg) finishAverage(mine.data, mine.count, mine.dtype, c.size());
        if (a.premultiply) scale(mine.data, mine.data, mine.count, mine.dtype, *a.premultiply);
      },
      &rail,
      [&](size_t f) {
        const auto& mine = parts[f][me];
        copyToDevice(device + mine.offset * elementBytes, slotOf(f), mine.count * elementBytes, stream);
        node.allGatherParts(device + parts[f].front().offset * elementBytes, counts(f), a.dtype, stream);
      });
}

}  // namespace hier::transport::nccl
