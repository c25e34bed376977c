#include <vector>

#include "transport/collectives.h"
#include "transport/hierarchy/pipeline.h"
#include "transport/nccl/device_rails.h"
#include "transport/nccl/device_staging.h"
#include "transport/reduce.h"

namespace hier::transport::nccl {
// Per slot: the node sums of the fragment (one per node), then the rail's result.
size_t reduceScatterRailsPinnedBytes(const DeviceReduceScatter& a, const hierarchy::Topology& t) {
  return 2 * (size_t(t.nodeCount()) + 1) * railPieceBytes(a.count, a.dtype, t.size());
}

size_t reduceScatterRailsDeviceBytes(const DeviceReduceScatter& a, const hierarchy::Topology& t) {
  return 2 * size_t(t.nodeCount()) * railPieceBytes(a.count, a.dtype, t.size());
}

void reduceScatterRails(Collective& c, Communicator& node, const DeviceReduceScatter& a, cudaStream_t stream,
                        void* pinned, void* deviceScratch) {
  const shm::NodeArena::Deadline deadline{c.deadline(), c.timeout()};
  const hierarchy::Topology& t = c.communicator().topology(deadline);
  transport::Communicator& rail = c.communicator().railCommunicator(deadline);
  const ReduceOp sum = a.op == ReduceOp::Avg || a.premultiply ? ReduceOp::Sum : a.op;
  const size_t nodes = size_t(t.nodeCount()), elementBytes = elementSize(a.dtype);
  const auto fragments = railFragments(a.count, a.dtype, t.size());
  const size_t stride = railPieceBytes(a.count, a.dtype, t.size());
  // Device slot f % 2: this rank's node sums of fragment f, one per node; pinned slot f % 2: the same,
  // then the rail's result.
  auto deviceSum = [&](size_t f, size_t n) { return static_cast<char*>(deviceScratch) + ((f % 2) * nodes + n) * stride; };
  auto hostSum = [&](size_t f, size_t n) { return static_cast<char*>(pinned) + ((f % 2) * (nodes + 1) + n) * stride; };
  auto inputPiece = [&](int rank, size_t f) {
    return static_cast<const char*>(a.input) + (size_t(rank) * a.count + fragments[f].offset) * elementBytes;
  };
  Event copied[2];  // fragment f's node sums reached pinned slot f % 2

  hierarchy::runCollectNetworkSpread(
      fragments.size(),
      [&](size_t f) {
        std::vector<Communicator::Rooted> calls;
        for (size_t n = 0; n < nodes; ++n) {
          // The node's sum of the piece of node n's rank l lands on this node's rank l (on that rank's rail).
          const auto& ranks = t.nodes[n];
          for (size_t l = 0; l < ranks.size(); ++l) calls.push_back({inputPiece(ranks[l], f), deviceSum(f, n), fragments[f].count, int(l)});
        }
        node.reduceRooted(calls, a.dtype, sum, stream);
        copyToHost(hostSum(f, 0), deviceSum(f, 0), nodes * stride, stream);
        copied[f % 2].record(stream);
      },
      [&](size_t f) {
        node.waitFor(copied[f % 2].get(), {c.deadline(), c.timeout()});
        std::vector<Buffer> sums;
        for (size_t n = 0; n < nodes; ++n) sums.push_back(Buffer{hostSum(f, n), fragments[f].count, a.dtype, MemoryType::Host});
        const Buffer result{hostSum(f, nodes), fragments[f].count, a.dtype, MemoryType::Host};
        Collective step(rail, c);
        transport::reduceScatter(step, sums, result, sum);
        if (a.op == ReduceOp::Avg) finishAverage(result.data, result.count, result.dtype, c.size());
        if (a.premultiply) scale(result.data, result.data, result.count, result.dtype, *a.premultiply);
      },
      &rail,
      [&](size_t f) {
        copyToDevice(static_cast<char*>(a.output) + fragments[f].offset * elementBytes, hostSum(f, nodes),
                     fragments[f].count * elementBytes, stream);
      });
}

}  // namespace hier::transport::nccl
