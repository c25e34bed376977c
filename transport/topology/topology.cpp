#include "transport/topology/topology.h"

#include <algorithm>

namespace hier::transport {

Topology Topology::fromHosts(const std::vector<std::string>& hostOfRank, int rank) {
  Topology t;
  t.rank = rank;
  std::vector<std::string> hosts;
  for (const auto& host : hostOfRank) {
    auto it = std::find(hosts.begin(), hosts.end(), host);
    int node = int(it - hosts.begin());
    if (it == hosts.end()) {
      hosts.push_back(host);
      t.nodes.emplace_back();
    }
    t.nodeOf.push_back(node);
    t.localRankOf.push_back(int(t.nodes[size_t(node)].size()));
    t.nodes[size_t(node)].push_back(int(t.nodeOf.size()) - 1);
  }
  return t;
}

bool Topology::uniform() const {
  for (const auto& node : nodes) {
    if (node.size() != nodes.front().size()) return false;
  }
  return true;
}

std::vector<int> Topology::rail(int local) const {
  std::vector<int> ranks;
  for (const auto& node : nodes) {
    if (size_t(local) < node.size()) ranks.push_back(node[size_t(local)]);
  }
  return ranks;
}

std::vector<int> Topology::leaders() const { return rail(0); }

std::string Topology::describe() const {
  std::string text = std::to_string(nodeCount()) + (nodeCount() == 1 ? " node:" : " nodes:");
  for (const auto& node : nodes) {
    text += " [";
    for (size_t i = 0; i < node.size(); ++i) text += (i ? " " : "") + std::to_string(node[i]);
    text += "]";
  }
  return text;
}

}  // namespace hier::transport
