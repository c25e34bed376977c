// Rails reduce (uniform layouts): every node reduces to its rank on the root's rail (the root itself on
// the root's node), then that rail reduces to the root. Only the root's output changes: the other ranks
// on the rail keep their node sums in scratch. AVG sums throughout; the root divides at the end.
#include <algorithm>

#include "transport/collectives.h"
#include "transport/hierarchy/schedules.h"
#include "transport/reduce.h"

namespace hier::transport::hierarchy {

void reduceRails(Collective& c, const Buffer& input, const Buffer& output, ReduceOp op, int root) {
  const shm::NodeArena::Deadline deadline{c.deadline(), c.timeout()};
  const Topology& t = c.communicator().topology(deadline);
  const int rootLocal = t.localRankOf[size_t(root)];
  const ReduceOp sum = op == ReduceOp::Avg ? ReduceOp::Sum : op;
  const bool onRootRail = t.localRank() == rootLocal;
  Buffer nodeSum = output;
  if (onRootRail && c.rank() != root) {
    nodeSum = Buffer{c.scratch(std::max<size_t>(input.bytes(), 1)), input.count, input.dtype, MemoryType::Host};
  }
  {
    Collective step(c.communicator().nodeCommunicator(deadline), c);
    transport::reduce(step, input, onRootRail ? nodeSum : input, sum, rootLocal);
  }
  if (onRootRail) {
    Collective step(c.communicator().railCommunicator(deadline), c);
    transport::reduce(step, nodeSum, nodeSum, sum, t.nodeOf[size_t(root)]);
  }
  if (c.rank() == root && op == ReduceOp::Avg) finishAverage(output.data, output.count, output.dtype, c.size());
}

}  // namespace hier::transport::hierarchy
