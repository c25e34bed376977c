// Rails broadcast (uniform layouts): the root's rail broadcasts across the nodes (one copy per node over
// the network), then every node broadcasts from its rank on that rail. Fragment by fragment: a node
// broadcasts one fragment while the rail carries the next (pipeline.h).
#include "transport/flat/flat.h"
#include "transport/group/collective.h"
#include "transport/hierarchy/node_steps.h"
#include "transport/hierarchy/pipeline.h"

namespace hier::transport::hierarchy {

void broadcastRails(Collective& c, NodeSteps& node, const Buffer& data, int root) {
  const Topology& t = c.group().topology(c.deadline());
  const int rootLocal = t.localRankOf[size_t(root)];
  const bool isRoot = c.rank() == root;
  Group* rail = t.localRank() == rootLocal ? &c.group().rail(c.deadline()) : nullptr;
  const auto fragments = fragmentRanges(data.count, fragmentCount(data.bytes(), data.count));
  auto fragment = [&](size_t f) { return data.slice(fragments[f].offset, fragments[f].count); };
  auto staged = [&](size_t f) { return node.networkView(f, fragment(f), 0); };
  node.reserveSlots(fragments.front().count * elementSize(data.dtype));

  std::function<void(size_t)> network;
  if (rail != nullptr) {
    network = [&](size_t f) {
      // The root's copy out has landed; on the others, the copy in of fragment f - 2 out of the same
      // slot has (it was issued before), so the message may overwrite it.
      node.awaitStaged(f);
      Collective step(*rail, c);
      flat::broadcast(step, staged(f), t.nodeOf[size_t(root)]);
    };
  }
  runCollectNetworkSpread(
      node, fragments.size(),
      [&](size_t f) {
        if (rail == nullptr) return;
        if (isRoot) node.copyOut(fragment(f), staged(f));
        node.staged(f);
      },
      network, rail,
      [&](size_t f) {
        if (rail != nullptr && !isRoot) node.copyIn(staged(f), fragment(f));
        node.broadcast(fragment(f), rootLocal);
      });
}

}  // namespace hier::transport::hierarchy
