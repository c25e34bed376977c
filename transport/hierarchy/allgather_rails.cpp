// Rails allgather (uniform layouts): first each rail gathers its members' parts across the nodes
// (local rank l receives the parts of rank l of every node), then each node gathers, node by node,
// what its ranks received. Each part crosses the network once, towards its own rail. Every part is cut
// into the same number of fragments; the node steps of one fragment overlap the rail step of the next
// (pipeline.h).
#include <algorithm>

#include "transport/flat/flat.h"
#include "transport/group/collective.h"
#include "transport/hierarchy/node_steps.h"
#include "transport/hierarchy/pipeline.h"

namespace hier::transport::hierarchy {
namespace {

size_t smallestCount(const std::vector<Buffer>& parts) {
  size_t count = parts.front().count;
  for (const auto& part : parts) count = std::min(count, part.count);
  return count;
}

}  // namespace

void allgatherRails(Collective& c, NodeSteps& node, const Buffer& input, const std::vector<Buffer>& outputs) {
  const Topology& t = c.group().topology(c.deadline());
  Group& rail = c.group().rail(c.deadline());
  const std::vector<int> railRanks = t.rail(t.localRank());  // one per node, in node order
  // Parts may differ in size; each is cut into `fragments` ranges of its own (every rank knows every
  // part's size, so all cut alike). No fragment of the smallest part is empty unless the part is.
  const size_t fragments = fragmentCount(totalBytes(outputs), smallestCount(outputs) * outputs.size(), outputs.size());
  std::vector<std::vector<Range>> ranges;
  for (const auto& part : outputs) ranges.push_back(fragmentRanges(part.count, fragments));
  auto piece = [&](int member, size_t f) {
    const auto& r = ranges[size_t(member)][f];
    return outputs[size_t(member)].slice(r.offset, r.count);
  };
  const auto& myRange = ranges[size_t(c.rank())];
  // A fragment stages the pieces of its rail's members, node after node, `stride` bytes apart.
  size_t stride = 0;
  for (int member : railRanks) stride = std::max(stride, piece(member, 0).bytes());
  node.reserveSlots(railRanks.size() * stride);
  auto staged = [&](size_t f, size_t n) { return node.networkView(f, piece(railRanks[n], f), n * stride); };

  runCollectNetworkSpread(
      node, fragments,
      [&](size_t f) {
        node.copyOut(input.slice(myRange[f].offset, myRange[f].count), staged(f, size_t(t.node())));
        node.staged(f);
      },
      [&](size_t f) {
        node.awaitStaged(f);
        std::vector<Buffer> railParts;
        for (size_t n = 0; n < railRanks.size(); ++n) railParts.push_back(staged(f, n));
        Collective step(rail, c);
        flat::allgather(step, railParts[size_t(t.node())], railParts);
      },
      &rail,
      [&](size_t f) {
        for (size_t n = 0; n < railRanks.size(); ++n) node.copyIn(staged(f, n), piece(railRanks[n], f));
        node.together([&] {
          for (const auto& ranks : t.nodes) {
            std::vector<Buffer> nodeParts;
            for (int member : ranks) nodeParts.push_back(piece(member, f));
            node.allgather(nodeParts);
          }
        });
      });
}

}  // namespace hier::transport::hierarchy
