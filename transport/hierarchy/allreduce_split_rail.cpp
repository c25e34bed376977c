// Split-rail allreduce: the node reduce-scatters the buffer (local rank l owns part l, summed over the
// node), each rail allreduces its part across the nodes (all rails at once, each on 1/L of the data),
// and the node allgathers the parts. AVG sums throughout and divides once at the end of the rail step.
#include "transport/algorithms/algorithms.h"
#include "transport/collectives.h"
#include "transport/hierarchy/schedules.h"
#include "transport/reduce.h"

namespace hier::transport::hierarchy {

void allreduceSplitRail(Collective& c, const Buffer& data, ReduceOp op) {
  const shm::NodeArena::Deadline deadline{c.deadline(), c.timeout()};
  Communicator& node = c.communicator().nodeCommunicator(deadline);
  Communicator& rail = c.communicator().railCommunicator(deadline);
  const ReduceOp sum = op == ReduceOp::Avg ? ReduceOp::Sum : op;
  const auto parts = algorithms::splitEvenly(data, node.size());
  const Buffer& mine = parts[size_t(node.rank())];
  {
    Collective step(node, c);
    transport::reduceScatter(step, parts, mine, sum);
  }
  {
    Collective step(rail, c);
    transport::allreduce(step, mine, sum);
  }
  if (op == ReduceOp::Avg) finishAverage(mine.data, mine.count, mine.dtype, c.size());
  Collective step(node, c);
  transport::allgather(step, mine, parts);
}

}  // namespace hier::transport::hierarchy
