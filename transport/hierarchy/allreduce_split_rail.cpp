// Split-rail allreduce: the node reduce-scatters the buffer (local rank l owns part l, summed over the
// node), each rail allreduces its part across the nodes (all rails at once, each on 1/L of the data),
// and the node allgathers the parts. Fragment by fragment, so the rail step of one fragment overlaps
// the node steps of its neighbours (pipeline.h). AVG sums throughout and divides once, after the rail
// step.
#include "transport/collectives.h"
#include "transport/hierarchy/pipeline.h"
#include "transport/hierarchy/schedules.h"
#include "transport/reduce.h"

namespace hier::transport::hierarchy {

void allreduceSplitRail(Collective& c, const Buffer& data, ReduceOp op) {
  const shm::NodeArena::Deadline deadline{c.deadline(), c.timeout()};
  Communicator& node = c.communicator().nodeCommunicator(deadline);
  Communicator& rail = c.communicator().railCommunicator(deadline);
  const ReduceOp sum = op == ReduceOp::Avg ? ReduceOp::Sum : op;
  // Every fragment is split among the node's ranks: at least one element each.
  std::vector<std::vector<Buffer>> parts;
  for (const auto& fragment : fragmentParts(data.count, elementSize(data.dtype), node.size())) {
    parts.emplace_back();
    for (const auto& part : fragment) parts.back().push_back(data.slice(part.offset, part.count));
  }
  const size_t me = size_t(node.rank());

  runCollectNetworkSpread(
      parts.size(),
      [&](size_t f) {
        Collective step(node, c);
        transport::reduceScatter(step, parts[f], parts[f][me], sum);
      },
      [&](size_t f) {
        const Buffer& mine = parts[f][me];
        Collective step(rail, c);
        transport::allreduce(step, mine, sum);
        if (op == ReduceOp::Avg) finishAverage(mine.data, mine.count, mine.dtype, c.size());
      },
      &rail,
      [&](size_t f) {
        Collective step(node, c);
        transport::allgather(step, parts[f][me], parts[f]);
      });
}

}  // namespace hier::transport::hierarchy
