#include <algorithm>
#include <vector>

#include "transport/collectives.h"
#include "transport/hierarchy/pipeline.h"
#include "transport/nccl/device_rails.h"
#include "transport/nccl/device_staging.h"

namespace hier::transport::nccl {

std::vector<algorithms::Range> railFragments(size_t count, DataType dtype, int worldSize) {
  const size_t world = size_t(worldSize);
  return hierarchy::fragmentRanges(count,
                                   hierarchy::fragmentCount(count * elementSize(dtype) * world, count * world, world));
}

size_t railPieceBytes(size_t count, DataType dtype, int worldSize) {
  return std::max<size_t>(railFragments(count, dtype, worldSize).front().count * elementSize(dtype), 1);
}

size_t allgatherRailsPinnedBytes(const DeviceAllgather& a, const hierarchy::Topology& t) {
  return 2 * size_t(t.nodeCount()) * railPieceBytes(a.count, a.dtype, t.size());
}

void allgatherRails(Collective& c, Communicator& node, const DeviceAllgather& a, cudaStream_t stream, void* pinned) {
  const shm::NodeArena::Deadline deadline{c.deadline(), c.timeout()};
  const hierarchy::Topology& t = c.communicator().topology(deadline);
  transport::Communicator& rail = c.communicator().railCommunicator(deadline);
  const std::vector<int> railRanks = t.rail(t.localRank());
  const size_t nodes = size_t(t.nodeCount()), elementBytes = elementSize(a.dtype);
  const auto fragments = railFragments(a.count, a.dtype, t.size());
  const size_t stride = railPieceBytes(a.count, a.dtype, t.size());
  // Slot f % 2 holds fragment f of every member of this rank's rail, node by node.
  auto slotPiece = [&](size_t f, size_t n) { return static_cast<char*>(pinned) + ((f % 2) * nodes + n) * stride; };
  auto outputPiece = [&](int rank, size_t f) {
    return static_cast<char*>(a.output) + (size_t(rank) * a.count + fragments[f].offset) * elementBytes;
  };
  Event copied[2];  // this rank's piece of fragment f reached slot f % 2

  hierarchy::runCollectNetworkSpread(
      fragments.size(),
      [&](size_t f) {
        copyToHost(slotPiece(f, size_t(t.node())), static_cast<const char*>(a.input) + fragments[f].offset * elementBytes,
                   fragments[f].count * elementBytes, stream);
        copied[f % 2].record(stream);
      },
      [&](size_t f) {
        node.waitFor(copied[f % 2].get(), {c.deadline(), c.timeout()});
        std::vector<Buffer> pieces;
        for (size_t n = 0; n < nodes; ++n) pieces.push_back(Buffer{slotPiece(f, n), fragments[f].count, a.dtype, MemoryType::Host});
        Collective step(rail, c);
        transport::allgather(step, pieces[size_t(t.node())], pieces);
      },
      &rail,
      [&](size_t f) {
        for (size_t n = 0; n < nodes; ++n) {
          copyToDevice(outputPiece(railRanks[n], f), slotPiece(f, n), fragments[f].count * elementBytes, stream);
        }
        std::vector<Communicator::Rooted> calls;
        for (const auto& ranks : t.nodes) {
          for (size_t l = 0; l < ranks.size(); ++l) {
            char* piece = outputPiece(ranks[l], f);
            calls.push_back({piece, piece, fragments[f].count, int(l)});
          }
        }
        node.broadcastRooted(calls, a.dtype, stream);
      });
}

}  // namespace hier::transport::nccl
