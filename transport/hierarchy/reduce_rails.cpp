// Rails reduce (uniform layouts): every node reduces to its rank on the root's rail (the root itself on
// the root's node), then that rail reduces to the root. Only the root's output changes: the other ranks
// on the rail keep their node sums in scratch. Fragment by fragment: the rail reduces one fragment while
// the nodes reduce the next (pipeline.h). AVG sums throughout; the root divides at the end.
#include <algorithm>

#include "transport/collectives.h"
#include "transport/hierarchy/pipeline.h"
#include "transport/hierarchy/schedules.h"
#include "transport/reduce.h"

namespace hier::transport::hierarchy {

void reduceRails(Collective& c, const Buffer& input, const Buffer& output, ReduceOp op, int root) {
  const shm::NodeArena::Deadline deadline{c.deadline(), c.timeout()};
  const Topology& t = c.communicator().topology(deadline);
  const int rootLocal = t.localRankOf[size_t(root)];
  const ReduceOp sum = op == ReduceOp::Avg ? ReduceOp::Sum : op;
  const bool onRootRail = t.localRank() == rootLocal;
  Communicator& node = c.communicator().nodeCommunicator(deadline);
  Communicator* rail = onRootRail ? &c.communicator().railCommunicator(deadline) : nullptr;
  Buffer nodeSum = output;
  if (onRootRail && c.rank() != root) {
    nodeSum = Buffer{c.scratch(std::max<size_t>(input.bytes(), 1)), input.count, input.dtype, MemoryType::Host};
  }
  const auto fragments = fragmentRanges(input.count, fragmentCount(input.bytes(), input.count));
  auto fragment = [&](const Buffer& whole, size_t f) { return whole.slice(fragments[f].offset, fragments[f].count); };

  std::function<void(size_t)> network;
  if (rail != nullptr) {
    network = [&](size_t f) {
      Collective step(*rail, c);
      transport::reduce(step, fragment(nodeSum, f), fragment(nodeSum, f), sum, t.nodeOf[size_t(root)]);
    };
  }
  NetworkStage stage(fragments.size(), network, rail);
  for (size_t f = 0; f < fragments.size(); ++f) {
    Collective step(node, c);
    transport::reduce(step, fragment(input, f), fragment(onRootRail ? nodeSum : input, f), sum, rootLocal);
    stage.release(f);
  }
  stage.await(fragments.size() - 1);
  if (c.rank() == root && op == ReduceOp::Avg) finishAverage(output.data, output.count, output.dtype, c.size());
}

}  // namespace hier::transport::hierarchy
