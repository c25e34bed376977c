// Rails reduce-scatter (uniform layouts): for each node n, the ranks of this node reduce-scatter the
// parts meant for node n's ranks (local rank l keeps the node's sum of the part for rank (n, l)); then
// each rail reduce-scatters those sums across the nodes, so rank (n, l) ends with the total of its part.
// Every part is cut into the same number of fragments; the rail step of one fragment overlaps the node
// steps of the next (pipeline.h). AVG sums throughout and divides once at the end.
#include <algorithm>

#include "transport/collectives.h"
#include "transport/hierarchy/pipeline.h"
#include "transport/hierarchy/schedules.h"
#include "transport/reduce.h"

namespace hier::transport::hierarchy {

void reduceScatterRails(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, ReduceOp op) {
  const shm::NodeArena::Deadline deadline{c.deadline(), c.timeout()};
  const Topology& t = c.communicator().topology(deadline);
  Communicator& node = c.communicator().nodeCommunicator(deadline);
  Communicator& rail = c.communicator().railCommunicator(deadline);
  const ReduceOp sum = op == ReduceOp::Avg ? ReduceOp::Sum : op;
  const size_t elementBytes = elementSize(output.dtype);

  size_t totalBytes = 0, smallest = inputs.front().count;
  for (const auto& part : inputs) {
    totalBytes += part.bytes();
    smallest = std::min(smallest, part.count);
  }
  const size_t fragments = fragmentCount(totalBytes, smallest * inputs.size(), inputs.size());
  std::vector<std::vector<algorithms::Range>> ranges;  // by rank, the fragments of that rank's part
  for (const auto& part : inputs) ranges.push_back(fragmentRanges(part.count, fragments));
  auto piece = [&](const Buffer& whole, int owner, size_t f) {
    const auto& r = ranges[size_t(owner)][f];
    return whole.slice(r.offset, r.count);
  };

  // This rank's node sums, one per node (of the part of that node's rank on this rank's rail), in scratch.
  size_t total = 0;
  for (const auto& ranks : t.nodes) total += inputs[size_t(ranks[size_t(t.localRank())])].count;
  char* staging = c.scratch(std::max<size_t>(total * elementBytes, 1));
  std::vector<Buffer> sums;
  for (const auto& ranks : t.nodes) {
    const size_t count = inputs[size_t(ranks[size_t(t.localRank())])].count;
    sums.push_back(Buffer{staging, count, output.dtype, MemoryType::Host});
    staging += count * elementBytes;
  }
  const std::vector<int> railRanks = t.rail(t.localRank());

  NetworkStage stage(
      fragments,
      [&](size_t f) {
        std::vector<Buffer> railInputs;
        for (size_t n = 0; n < t.nodes.size(); ++n) railInputs.push_back(piece(sums[n], railRanks[n], f));
        Collective step(rail, c);
        transport::reduceScatter(step, railInputs, piece(output, c.rank(), f), sum);
      },
      &rail);
  for (size_t f = 0; f < fragments; ++f) {
    for (size_t n = 0; n < t.nodes.size(); ++n) {
      std::vector<Buffer> nodeParts;
      for (int member : t.nodes[n]) nodeParts.push_back(piece(inputs[size_t(member)], member, f));
      Collective step(node, c);
      transport::reduceScatter(step, nodeParts, piece(sums[n], railRanks[n], f), sum);
    }
    stage.release(f);
  }
  stage.await(fragments - 1);
  if (op == ReduceOp::Avg) finishAverage(output.data, output.count, output.dtype, c.size());
}

}  // namespace hier::transport::hierarchy
