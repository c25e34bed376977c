// Rails broadcast (uniform layouts): the root's rail broadcasts across the nodes (one copy per node over
// the network), then every node broadcasts from its rank on that rail. Fragment by fragment: a node
// broadcasts one fragment while the rail carries the next (pipeline.h).
#include "transport/collectives.h"
#include "transport/hierarchy/pipeline.h"
#include "transport/hierarchy/schedules.h"

namespace hier::transport::hierarchy {

void broadcastRails(Collective& c, const Buffer& data, int root) {
  const shm::NodeArena::Deadline deadline{c.deadline(), c.timeout()};
  const Topology& t = c.communicator().topology(deadline);
  const int rootLocal = t.localRankOf[size_t(root)];
  Communicator& node = c.communicator().nodeCommunicator(deadline);
  Communicator* rail = t.localRank() == rootLocal ? &c.communicator().railCommunicator(deadline) : nullptr;
  const auto fragments = fragmentRanges(data.count, fragmentCount(data.bytes(), data.count));
  auto fragment = [&](size_t f) { return data.slice(fragments[f].offset, fragments[f].count); };

  std::function<void(size_t)> network;
  if (rail != nullptr) {
    network = [&](size_t f) {
      Collective step(*rail, c);
      transport::broadcast(step, fragment(f), t.nodeOf[size_t(root)]);
    };
  }
  NetworkStage stage(fragments.size(), network, rail);
  stage.releaseAll();
  for (size_t f = 0; f < fragments.size(); ++f) {
    stage.await(f);
    Collective step(node, c);
    transport::broadcast(step, fragment(f), rootLocal);
  }
}

}  // namespace hier::transport::hierarchy
