// Rails reduce (uniform layouts): every node reduces to its rank on the root's rail (the root itself on
// the root's node), then that rail reduces to the root. Only the root's output changes: the other ranks
// on the rail keep their node results in node-memory scratch, two fragments' worth, in turn. Fragment
// by fragment: the rail reduces one fragment while the nodes reduce the next (pipeline.h).
#include "transport/flat/flat.h"
#include "transport/group/collective.h"
#include "transport/hierarchy/node_steps.h"
#include "transport/hierarchy/pipeline.h"
#include "transport/hierarchy/reduction_stages.h"

namespace hier::transport::hierarchy {

void reduceRails(Collective& c, NodeSteps& node, const Buffer& input, const Buffer& output, ReduceOp op, int root,
                 std::optional<double> premultiply) {
  const Topology& t = c.group().topology(c.deadline());
  const int rootLocal = t.localRankOf[size_t(root)];
  const bool isRoot = c.rank() == root;
  const bool onRootRail = t.localRank() == rootLocal;
  Group* rail = onRootRail ? &c.group().rail(c.deadline()) : nullptr;
  const ReductionStages stages = reductionStages(op, premultiply, t, node, input.dtype);
  const auto fragments = fragmentRanges(input.count, fragmentCount(input.bytes(), input.count));
  const size_t stride = fragments.front().count;
  Buffer sums;  // the node results of the rail members other than the root
  if (onRootRail && !isRoot) sums = node.scratch(2 * stride, input.dtype);
  auto fragment = [&](const Buffer& whole, size_t f) { return whole.slice(fragments[f].offset, fragments[f].count); };
  // Where this rank's node step puts its node's result: the root's output, a rail member's scratch; the
  // others' results go nowhere (their node step only contributes).
  auto nodeResult = [&](size_t f) {
    if (isRoot) return fragment(output, f);
    if (onRootRail) return sums.slice((f % 2) * stride, fragments[f].count);
    return fragment(input, f);
  };
  auto staged = [&](size_t f) { return node.hostView(f, nodeResult(f), 0); };
  node.reserveSlots(stride * elementSize(input.dtype));

  std::function<void(size_t)> network;
  if (rail != nullptr) {
    network = [&](size_t f) {
      node.awaitStaged(f);
      const Buffer part = staged(f);
      Collective step(*rail, c);
      flat::reduce(step, part, part, stages.network, t.nodeOf[size_t(root)]);
      if (isRoot) stages.finish(part);
    };
  }
  runCollectNetworkSpread(
      node, fragments.size(),
      [&](size_t f) {
        node.reduce(fragment(input, f), nodeResult(f), stages.node, rootLocal);
        if (rail == nullptr) return;
        node.copyOut(nodeResult(f), staged(f));
        node.staged(f);
      },
      network, rail,
      [&](size_t f) {
        if (isRoot) node.copyIn(staged(f), nodeResult(f));
      });
}

}  // namespace hier::transport::hierarchy
