// Rails allgather (uniform layouts): first each rail gathers its members' parts across the nodes
// (local rank l receives the parts of rank l of every node), then each node gathers, node by node,
// what its ranks received. Each part crosses the network once, towards its own rail.
#include "transport/collectives.h"
#include "transport/hierarchy/schedules.h"

namespace hier::transport::hierarchy {

void allgatherRails(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs) {
  const shm::NodeArena::Deadline deadline{c.deadline(), c.timeout()};
  const Topology& t = c.communicator().topology(deadline);
  Communicator& node = c.communicator().nodeCommunicator(deadline);
  Communicator& rail = c.communicator().railCommunicator(deadline);
  {
    std::vector<Buffer> railParts;
    for (int member : t.rail(t.localRank())) railParts.push_back(outputs[size_t(member)]);
    Collective step(rail, c);
    transport::allgather(step, input, railParts);
  }
  for (const auto& ranks : t.nodes) {
    std::vector<Buffer> nodeParts;
    for (int member : ranks) nodeParts.push_back(outputs[size_t(member)]);
    Collective step(node, c);
    transport::allgather(step, nodeParts[size_t(t.localRank())], nodeParts);
  }
}

}  // namespace hier::transport::hierarchy
