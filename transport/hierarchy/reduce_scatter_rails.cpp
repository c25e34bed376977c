// Rails reduce-scatter (uniform layouts): for each node n, the ranks of this node reduce-scatter the
// parts meant for node n's ranks (local rank l keeps the node's reduction of the part for rank (n, l));
// then each rail reduce-scatters those node results across the nodes, so rank (n, l) ends with the total
// of its part. Every part is cut into the same number of fragments; the rail step of one fragment
// overlaps the node steps of the next (pipeline.h). The node results of a fragment live in node-memory
// scratch, two fragments' worth, in turn.
#include <algorithm>

#include "transport/flat/flat.h"
#include "transport/group/collective.h"
#include "transport/hierarchy/node_steps.h"
#include "transport/hierarchy/pipeline.h"
#include "transport/hierarchy/reduction_stages.h"

namespace hier::transport::hierarchy {

void reduceScatterRails(Collective& c, NodeSteps& node, const std::vector<Buffer>& inputs, const Buffer& output,
                        ReduceOp op, std::optional<double> premultiply) {
  const Topology& t = c.group().topology(c.deadline());
  Group& rail = c.group().rail(c.deadline());
  const ReductionStages stages = reductionStages(op, premultiply, t, node, output.dtype);
  const std::vector<int> railRanks = t.rail(t.localRank());  // one per node, in node order
  const size_t nodes = railRanks.size();

  size_t totalBytes = 0, smallest = inputs.front().count;
  for (const auto& part : inputs) {
    totalBytes += part.bytes();
    smallest = std::min(smallest, part.count);
  }
  const size_t fragments = fragmentCount(totalBytes, smallest * inputs.size(), inputs.size());
  std::vector<std::vector<Range>> ranges;  // by rank, the fragments of that rank's part
  for (const auto& part : inputs) ranges.push_back(fragmentRanges(part.count, fragments));
  auto piece = [&](const Buffer& whole, int owner, size_t f) {
    const auto& r = ranges[size_t(owner)][f];
    return whole.slice(r.offset, r.count);
  };

  // Node results: for fragment f, node n's at (f % 2, n), `stride` elements apart; staged node after
  // node, then the rail's result.
  size_t stride = 0;
  for (int member : railRanks) stride = std::max(stride, ranges[size_t(member)][0].count);
  const Buffer sums = node.scratch(2 * nodes * stride, output.dtype);
  auto sum = [&](size_t f, size_t n) {
    return sums.slice(((f % 2) * nodes + n) * stride, ranges[size_t(railRanks[n])][f].count);
  };
  const size_t strideBytes = stride * elementSize(output.dtype);
  node.reserveSlots((nodes + 1) * strideBytes);
  auto stagedSum = [&](size_t f, size_t n) { return node.hostView(f, sum(f, n), n * strideBytes); };
  auto result = [&](size_t f) { return piece(output, c.rank(), f); };
  auto stagedResult = [&](size_t f) { return node.hostView(f, result(f), nodes * strideBytes); };

  runCollectNetworkSpread(
      node, fragments,
      [&](size_t f) {
        node.together([&] {
          for (size_t n = 0; n < nodes; ++n) {
            std::vector<Buffer> nodeParts;
            for (int member : t.nodes[n]) nodeParts.push_back(piece(inputs[size_t(member)], member, f));
            node.reduceScatter(nodeParts, sum(f, n), stages.node);
          }
        });
        for (size_t n = 0; n < nodes; ++n) node.copyOut(sum(f, n), stagedSum(f, n));
        node.staged(f);
      },
      [&](size_t f) {
        node.awaitStaged(f);
        std::vector<Buffer> railInputs;
        for (size_t n = 0; n < nodes; ++n) railInputs.push_back(stagedSum(f, n));
        const Buffer mine = stagedResult(f);
        Collective step(rail, c);
        flat::reduceScatter(step, railInputs, mine, stages.network);
        stages.finish(mine);
      },
      &rail, [&](size_t f) { node.copyIn(stagedResult(f), result(f)); });
}

}  // namespace hier::transport::hierarchy
