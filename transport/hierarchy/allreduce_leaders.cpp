// Leaders allreduce: reduce inside each node to its first rank, allreduce among those, broadcast inside
// each node. Two node steps and one network step of the whole buffer: for small buffers, and for
// layouts without full rails.
#include "transport/collectives.h"
#include "transport/hierarchy/schedules.h"
#include "transport/reduce.h"

namespace hier::transport::hierarchy {

void allreduceLeaders(Collective& c, const Buffer& data, ReduceOp op) {
  const shm::NodeArena::Deadline deadline{c.deadline(), c.timeout()};
  Communicator& node = c.communicator().nodeCommunicator(deadline);
  Communicator* leaders = c.communicator().leadersCommunicator(deadline);
  const ReduceOp sum = op == ReduceOp::Avg ? ReduceOp::Sum : op;
  {
    Collective step(node, c);
    transport::reduce(step, data, data, sum, 0);
  }
  if (leaders != nullptr) {
    Collective step(*leaders, c);
    transport::allreduce(step, data, sum);
    if (op == ReduceOp::Avg) finishAverage(data.data, data.count, data.dtype, c.size());
  }
  Collective step(node, c);
  transport::broadcast(step, data, 0);
}

}  // namespace hier::transport::hierarchy
