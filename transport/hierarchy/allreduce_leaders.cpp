// Leaders allreduce: reduce inside each node to its first rank, allreduce among those, broadcast inside
// each node. Two node steps and one network step of the whole buffer: for small buffers, and for
// layouts without full rails. Large buffers go fragment by fragment, the leaders' step of one fragment
// overlapping the node steps of its neighbours (pipeline.h).
#include "transport/flat/flat.h"
#include "transport/group/collective.h"
#include "transport/hierarchy/node_steps.h"
#include "transport/hierarchy/pipeline.h"
#include "transport/hierarchy/reduction_stages.h"

namespace hier::transport::hierarchy {

void allreduceLeaders(Collective& c, NodeSteps& node, const Buffer& data, ReduceOp op,
                      std::optional<double> premultiply) {
  Group* leaders = c.group().leaders(c.deadline());  // this rank's, when it is its node's first
  const ReductionStages stages = reductionStages(op, premultiply, c.group().topology(c.deadline()), node, data.dtype);
  const auto fragments = fragmentRanges(data.count, fragmentCount(data.bytes(), data.count));
  auto fragment = [&](size_t f) { return data.slice(fragments[f].offset, fragments[f].count); };
  auto staged = [&](size_t f) { return node.hostView(f, fragment(f), 0); };
  node.reserveSlots(fragments.front().count * elementSize(data.dtype));

  std::function<void(size_t)> network;
  if (leaders != nullptr) {
    network = [&](size_t f) {
      node.awaitStaged(f);
      const Buffer part = staged(f);
      Collective step(*leaders, c);
      flat::allreduce(step, part, stages.network);
      stages.finish(part);
    };
  }
  runCollectNetworkSpread(
      node, fragments.size(),
      [&](size_t f) {
        node.reduce(fragment(f), fragment(f), stages.node, 0);
        if (leaders == nullptr) return;
        node.copyOut(fragment(f), staged(f));
        node.staged(f);
      },
      network, leaders,
      [&](size_t f) {
        if (leaders != nullptr) node.copyIn(staged(f), fragment(f));
        node.broadcast(fragment(f), 0);
      });
}

}  // namespace hier::transport::hierarchy
