// Which ranks of a communicator share a host: the nodes, each rank's place on its node, and the rails
// (the ranks with the same place on every node).
#pragma once

#include <string>
#include <vector>

namespace hier::transport {

struct Topology {
  // From every rank's host identity (host_identity.h), indexed by rank. Nodes are numbered in the order
  // their first rank appears; the ranks of a node are in rank order.
  static Topology fromHosts(const std::vector<std::string>& hostOfRank, int rank);

  int rank = 0;
  std::vector<int> nodeOf;              // node index of every rank
  std::vector<int> localRankOf;         // place of every rank on its node
  std::vector<std::vector<int>> nodes;  // ranks of every node

  int size() const { return int(nodeOf.size()); }
  int nodeCount() const { return int(nodes.size()); }
  int node() const { return nodeOf[size_t(rank)]; }
  int localRank() const { return localRankOf[size_t(rank)]; }
  int localSize() const { return int(nodes[size_t(node())].size()); }
  // Every node holds the same number of ranks (then every rank has a full rail).
  bool uniform() const;
  // The ranks with place `local` on each node, in node order (only nodes that have such a place).
  std::vector<int> rail(int local) const;
  // The first rank of every node.
  std::vector<int> leaders() const;
  // "2 nodes: [0 1] [2 3]", for logs.
  std::string describe() const;
};

}  // namespace hier::transport
