// Rails reduce-scatter (uniform layouts): for each node n, the ranks of this node reduce-scatter the
// parts meant for node n's ranks (local rank l keeps the node's sum of the part for rank (n, l)); then
// each rail reduce-scatters those sums across the nodes, so rank (n, l) ends with the total of its part.
// AVG sums throughout and divides once at the end.
#include <algorithm>

#include "transport/collectives.h"
#include "transport/hierarchy/schedules.h"
#include "transport/reduce.h"

namespace hier::transport::hierarchy {

void reduceScatterRails(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, ReduceOp op) {
  const shm::NodeArena::Deadline deadline{c.deadline(), c.timeout()};
  const Topology& t = c.communicator().topology(deadline);
  Communicator& node = c.communicator().nodeCommunicator(deadline);
  Communicator& rail = c.communicator().railCommunicator(deadline);
  const ReduceOp sum = op == ReduceOp::Avg ? ReduceOp::Sum : op;
  const size_t elementBytes = elementSize(output.dtype);

  // This rank's node sums, one per node, staged in scratch.
  size_t total = 0;
  for (const auto& ranks : t.nodes) total += inputs[size_t(ranks[size_t(t.localRank())])].count;
  char* staging = c.scratch(std::max<size_t>(total * elementBytes, 1));
  std::vector<Buffer> sums;
  size_t offset = 0;
  for (const auto& ranks : t.nodes) {
    const size_t count = inputs[size_t(ranks[size_t(t.localRank())])].count;
    sums.push_back(Buffer{staging + offset * elementBytes, count, output.dtype, MemoryType::Host});
    offset += count;
    std::vector<Buffer> nodeParts;
    for (int member : ranks) nodeParts.push_back(inputs[size_t(member)]);
    Collective step(node, c);
    transport::reduceScatter(step, nodeParts, sums.back(), sum);
  }
  Collective step(rail, c);
  transport::reduceScatter(step, sums, output, sum);
  if (op == ReduceOp::Avg) finishAverage(output.data, output.count, output.dtype, c.size());
}

}  // namespace hier::transport::hierarchy
