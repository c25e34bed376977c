// Split-rail allreduce: the node reduce-scatters the buffer (local rank l owns part l, reduced over the
// node), each rail allreduces its part across the nodes (all rails at once, each on 1/L of the data),
// and the node allgathers the parts. Fragment by fragment, so the rail step of one fragment overlaps
// the node steps of its neighbours (pipeline.h); only this rank's part of a fragment is staged.
#include <algorithm>

#include "transport/flat/flat.h"
#include "transport/group/collective.h"
#include "transport/hierarchy/node_steps.h"
#include "transport/hierarchy/pipeline.h"
#include "transport/hierarchy/reduction_stages.h"

namespace hier::transport::hierarchy {

void allreduceSplitRail(Collective& c, NodeSteps& node, const Buffer& data, ReduceOp op,
                        std::optional<double> premultiply) {
  Group& rail = c.group().rail(c.deadline());
  const ReductionStages stages = reductionStages(op, premultiply, c.group().topology(c.deadline()), node, data.dtype);
  // Every fragment is split among the node's ranks: at least one element each.
  const auto cut = fragmentParts(data.count, elementSize(data.dtype), node.size());
  const size_t me = size_t(node.rank());
  auto parts = [&](size_t f) {
    std::vector<Buffer> views;
    for (const auto& part : cut[f]) views.push_back(data.slice(part.offset, part.count));
    return views;
  };
  auto mine = [&](size_t f) { return data.slice(cut[f][me].offset, cut[f][me].count); };
  auto staged = [&](size_t f) { return node.hostView(f, mine(f), 0); };
  size_t largest = 0;
  for (const auto& fragment : cut) largest = std::max(largest, fragment[me].count);
  node.reserveSlots(largest * elementSize(data.dtype));

  runCollectNetworkSpread(
      node, cut.size(),
      [&](size_t f) {
        node.reduceScatter(parts(f), mine(f), stages.node);
        node.copyOut(mine(f), staged(f));
        node.staged(f);
      },
      [&](size_t f) {
        node.awaitStaged(f);
        const Buffer part = staged(f);
        Collective step(rail, c);
        flat::allreduce(step, part, stages.network);
        stages.finish(part);
      },
      &rail,
      [&](size_t f) {
        node.copyIn(staged(f), mine(f));
        node.allgather(parts(f));
      });
}

}  // namespace hier::transport::hierarchy
