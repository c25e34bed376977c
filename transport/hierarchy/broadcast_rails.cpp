// Rails broadcast (uniform layouts): the root's rail broadcasts across the nodes (one copy per node over
// the network), then every node broadcasts from its rank on that rail.
#include "transport/collectives.h"
#include "transport/hierarchy/schedules.h"

namespace hier::transport::hierarchy {

void broadcastRails(Collective& c, const Buffer& data, int root) {
  const shm::NodeArena::Deadline deadline{c.deadline(), c.timeout()};
  const Topology& t = c.communicator().topology(deadline);
  const int rootLocal = t.localRankOf[size_t(root)];
  if (t.localRank() == rootLocal) {
    Collective step(c.communicator().railCommunicator(deadline), c);
    transport::broadcast(step, data, t.nodeOf[size_t(root)]);
  }
  Collective step(c.communicator().nodeCommunicator(deadline), c);
  transport::broadcast(step, data, rootLocal);
}

}  // namespace hier::transport::hierarchy
