// The node steps of a hierarchical schedule on host memory: collectives on the node group of the
// schedule's collective (its shared-memory arena, or UCX), each a step of that collective. The network
// step works on the pieces themselves: staging moves nothing.
#pragma once

#include "transport/group/collective.h"
#include "transport/group/group.h"
#include "transport/hierarchy/node_steps.h"

namespace hier::transport::hierarchy {

class HostNodeSteps final : public NodeSteps {
 public:
  // `c`: the collective on the whole group, whose node group this is (made on first use).
  explicit HostNodeSteps(Collective& c);

  int rank() const override { return node_.rank(); }
  int size() const override { return node_.size(); }
  // The host reduces, then scales once at the end (ReductionStages::finish).
  bool scalesContributions(DataType, int) const override { return false; }

  void reduceScatter(const std::vector<Buffer>& inputs, const Buffer& output, const Reduction& how) override;
  void allgather(const std::vector<Buffer>& parts) override;
  void reduce(const Buffer& input, const Buffer& output, const Reduction& how, int root) override;
  void broadcast(const Buffer& data, int root) override;

  Buffer scratch(size_t count, DataType dtype) override;

  void reserveSlots(size_t) override {}
  Buffer hostView(size_t, const Buffer& piece, size_t) override { return piece; }
  void copyOut(const Buffer& piece, const Buffer& host) override { copy(host, piece); }
  void copyIn(const Buffer& host, const Buffer& piece) override { copy(piece, host); }
  void staged(size_t) override {}
  void awaitStaged(size_t) override {}

 private:
  static void copy(const Buffer& to, const Buffer& from);

  Collective& c_;
  Group& node_;
};

}  // namespace hier::transport::hierarchy
