// Leaders allreduce: reduce inside each node to its first rank, allreduce among those, broadcast inside
// each node. Two node steps and one network step of the whole buffer: for small buffers, and for
// layouts without full rails. Large buffers go fragment by fragment, the leaders' step of one fragment
// overlapping the node steps of its neighbours (pipeline.h).
#include "transport/collectives.h"
#include "transport/hierarchy/pipeline.h"
#include "transport/hierarchy/schedules.h"
#include "transport/reduce.h"

namespace hier::transport::hierarchy {

void allreduceLeaders(Collective& c, const Buffer& data, ReduceOp op) {
  const shm::NodeArena::Deadline deadline{c.deadline(), c.timeout()};
  Communicator& node = c.communicator().nodeCommunicator(deadline);
  Communicator* leaders = c.communicator().leadersCommunicator(deadline);
  const ReduceOp sum = op == ReduceOp::Avg ? ReduceOp::Sum : op;
  const auto fragments = fragmentRanges(data.count, fragmentCount(data.bytes(), data.count));
  auto fragment = [&](size_t f) { return data.slice(fragments[f].offset, fragments[f].count); };

  std::function<void(size_t)> network;
  if (leaders != nullptr) {
    network = [&](size_t f) {
      const Buffer part = fragment(f);
      Collective step(*leaders, c);
      transport::allreduce(step, part, sum);
      if (op == ReduceOp::Avg) finishAverage(part.data, part.count, part.dtype, c.size());
    };
  }
  runCollectNetworkSpread(
      fragments.size(),
      [&](size_t f) {
        Collective step(node, c);
        transport::reduce(step, fragment(f), fragment(f), sum, 0);
      },
      network, leaders,
      [&](size_t f) {
        Collective step(node, c);
        transport::broadcast(step, fragment(f), 0);
      });
}

}  // namespace hier::transport::hierarchy
