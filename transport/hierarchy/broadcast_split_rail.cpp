// Split-rail broadcast (uniform layouts): the root's node shares the buffer among its ranks, each rail
// broadcasts its part across the nodes from the root's node (local rank l's rail carries part l, 1/L of
// the data, so every rail and its network device carries a share), and every other node allgathers the
// parts. broadcastRails sends everything over the root's rail alone. Fragment by fragment, the rail step
// of one beside the node steps of its neighbours (pipeline.h); only this rank's part is staged.
#include <algorithm>

#include "transport/flat/flat.h"
#include "transport/group/collective.h"
#include "transport/hierarchy/node_steps.h"
#include "transport/hierarchy/pipeline.h"

namespace hier::transport::hierarchy {

void broadcastSplitRail(Collective& c, NodeSteps& node, const Buffer& data, int root) {
  const Topology& t = c.group().topology(c.deadline());
  const int rootNode = t.nodeOf[size_t(root)];
  const int rootLocal = t.localRankOf[size_t(root)];
  const bool onRootNode = t.node() == rootNode;
  Group& rail = c.group().rail(c.deadline());
  // Every fragment is split among the node's ranks: at least one element each.
  const auto cut = fragmentParts(data.count, elementSize(data.dtype), node.size());
  const size_t me = size_t(node.rank());
  auto parts = [&](size_t f) {
    std::vector<Buffer> views;
    for (const auto& part : cut[f]) views.push_back(data.slice(part.offset, part.count));
    return views;
  };
  auto fragment = [&](size_t f) {
    const size_t end = cut[f].back().offset + cut[f].back().count;
    return data.slice(cut[f].front().offset, end - cut[f].front().offset);
  };
  auto mine = [&](size_t f) { return data.slice(cut[f][me].offset, cut[f][me].count); };
  auto staged = [&](size_t f) { return node.networkView(f, mine(f), 0); };
  size_t largest = 0;
  for (const auto& parted : cut) largest = std::max(largest, parted[me].count);
  node.reserveSlots(largest * elementSize(data.dtype));

  runCollectNetworkSpread(
      node, cut.size(),
      [&](size_t f) {
        if (onRootNode) {
          node.broadcast(fragment(f), rootLocal);
          node.copyOut(mine(f), staged(f));
        }
        // Elsewhere nothing to copy out, but the slot's copy in of fragment f - 2 must have landed.
        node.staged(f);
      },
      [&](size_t f) {
        node.awaitStaged(f);
        Collective step(rail, c);
        flat::broadcast(step, staged(f), rootNode);
      },
      &rail,
      [&](size_t f) {
        if (onRootNode) return;
        node.copyIn(staged(f), mine(f));
        node.allgather(parts(f));
      });
}

}  // namespace hier::transport::hierarchy
