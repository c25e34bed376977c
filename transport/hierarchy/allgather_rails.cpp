// Rails allgather (uniform layouts): first each rail gathers its members' parts across the nodes
// (local rank l receives the parts of rank l of every node), then each node gathers, node by node,
// what its ranks received. Each part crosses the network once, towards its own rail. Every part is cut
// into the same number of fragments; the node steps of one fragment overlap the rail step of the next
// (pipeline.h).
#include <algorithm>

#include "transport/collectives.h"
#include "transport/hierarchy/pipeline.h"
#include "transport/hierarchy/schedules.h"

namespace hier::transport::hierarchy {
namespace {

size_t totalBytes(const std::vector<Buffer>& parts) {
  size_t bytes = 0;
  for (const auto& part : parts) bytes += part.bytes();
  return bytes;
}

size_t smallestCount(const std::vector<Buffer>& parts) {
  size_t count = parts.front().count;
  for (const auto& part : parts) count = std::min(count, part.count);
  return count;
}

}  // namespace

void allgatherRails(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs) {
  const shm::NodeArena::Deadline deadline{c.deadline(), c.timeout()};
  const Topology& t = c.communicator().topology(deadline);
  Communicator& node = c.communicator().nodeCommunicator(deadline);
  Communicator& rail = c.communicator().railCommunicator(deadline);
  // Parts may differ in size; each is cut into `fragments` ranges of its own (every rank knows every
  // part's size, so all cut alike). No fragment of the smallest part is empty unless the part is.
  const size_t fragments = fragmentCount(totalBytes(outputs), smallestCount(outputs) * outputs.size(), outputs.size());
  std::vector<std::vector<algorithms::Range>> ranges;
  for (const auto& part : outputs) ranges.push_back(fragmentRanges(part.count, fragments));
  auto piece = [&](int member, size_t f) {
    const auto& r = ranges[size_t(member)][f];
    return outputs[size_t(member)].slice(r.offset, r.count);
  };
  const auto& myRange = ranges[size_t(c.rank())];

  NetworkStage stage(
      fragments,
      [&](size_t f) {
        std::vector<Buffer> railParts;
        for (int member : t.rail(t.localRank())) railParts.push_back(piece(member, f));
        Collective step(rail, c);
        transport::allgather(step, input.slice(myRange[f].offset, myRange[f].count), railParts);
      },
      &rail);
  stage.releaseAll();
  for (size_t f = 0; f < fragments; ++f) {
    stage.await(f);
    for (const auto& ranks : t.nodes) {
      std::vector<Buffer> nodeParts;
      for (int member : ranks) nodeParts.push_back(piece(member, f));
      Collective step(node, c);
      transport::allgather(step, nodeParts[size_t(t.localRank())], nodeParts);
    }
  }
}

}  // namespace hier::transport::hierarchy
