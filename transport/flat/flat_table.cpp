#include "transport/flat/flat_table.h"

#include <cstddef>

#include "transport/arena/node_arena.h"
#include "transport/base/settings.h"

namespace hier::transport {

// ---- the algorithms, each in a file of its own -------------------------------------------------

// Over the group's messages (message_algorithms/): every rank of the group must call the same one with
// matching sizes; per-rank parts come as one Buffer per rank, so uneven sizes need no special case.
namespace algorithms {
// Every rank's `data` reduced into every rank's `data`.
void allreduceRecursiveDoubling(Collective& c, const Buffer& data, ReduceOp op);
void allreduceRing(Collective& c, const Buffer& data, ReduceOp op, size_t chunkBytes);
// Every rank's `input` reduced into `output` on `root` (ignored elsewhere; may alias input).
void reduceBinomial(Collective& c, const Buffer& input, const Buffer& output, ReduceOp op, int root);
void reduceRing(Collective& c, const Buffer& input, const Buffer& output, ReduceOp op, int root, size_t chunkBytes);
// `root`'s `data` copied into every rank's `data`.
void broadcastBinomial(Collective& c, const Buffer& data, int root);
void broadcastChain(Collective& c, const Buffer& data, int root, size_t chunkBytes);
// outputs[p] receives rank p's input (outputs[rank] may alias input).
void allgatherDirect(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs);
void allgatherRing(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs);
// output on rank p is the reduction of every rank's inputs[p].
void reduceScatterDirect(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, ReduceOp op);
void reduceScatterRing(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, ReduceOp op,
                       size_t chunkBytes);
// outputs[p] on root receives rank p's input.
void gatherLinear(Collective& c, const Buffer& input, const std::vector<Buffer>& outputs, int root);
// output on rank p receives root's inputs[p].
void scatterLinear(Collective& c, const std::vector<Buffer>& inputs, const Buffer& output, int root);
// outputs[p] receives rank p's inputs[rank].
void alltoallPairwise(Collective& c, const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs,
                      const std::vector<uint64_t>* known);
void barrierDissemination(Collective& c);
}  // namespace algorithms

// Through the group's arena (shm_algorithms/): every rank of the group on this host. The buffers go in
// chunks that fit a slot, through the two slots of each rank in turn, so a rank fills one slot while the
// others still read the previous one. `single_copy` and its kin read or write a peer's memory itself:
// only where arena.crossMemoryAttach().
namespace shm {
void allreduce(Collective& c, NodeArena& arena, const Buffer& data, ReduceOp op);
void allreduceSingleCopy(Collective& c, NodeArena& arena, const Buffer& data, ReduceOp op);
void reduce(Collective& c, NodeArena& arena, const Buffer& input, const Buffer& output, ReduceOp op, int root);
// The root alone reduces, from the others' slots.
void reduceAtRoot(Collective& c, NodeArena& arena, const Buffer& input, const Buffer& output, ReduceOp op, int root);
void broadcast(Collective& c, NodeArena& arena, const Buffer& data, int root);
void broadcastSingleCopy(Collective& c, NodeArena& arena, const Buffer& data, int root);
void broadcastSplitCopy(Collective& c, NodeArena& arena, const Buffer& data, int root);
void allgather(Collective& c, NodeArena& arena, const Buffer& input, const std::vector<Buffer>& outputs);
void allgatherSingleCopy(Collective& c, NodeArena& arena, const Buffer& input, const std::vector<Buffer>& outputs);
// Every rank's part as large as every other's: the chunks are counted from this rank's own buffer.
void gather(Collective& c, NodeArena& arena, const Buffer& input, const std::vector<Buffer>& outputs, int root);
void gatherWriteCopy(Collective& c, NodeArena& arena, const Buffer& input, const std::vector<Buffer>& outputs,
                     int root);
void scatter(Collective& c, NodeArena& arena, const std::vector<Buffer>& inputs, const Buffer& output, int root);
void scatterSingleCopy(Collective& c, NodeArena& arena, const std::vector<Buffer>& inputs, const Buffer& output,
                       int root);
void reduceScatter(Collective& c, NodeArena& arena, const std::vector<Buffer>& inputs, const Buffer& output,
                   ReduceOp op);
void alltoall(Collective& c, NodeArena& arena, const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs,
              const std::vector<uint64_t>* known);
void alltoallSingleCopy(Collective& c, NodeArena& arena, const std::vector<Buffer>& inputs,
                        const std::vector<Buffer>& outputs, const std::vector<uint64_t>* known);
}  // namespace shm

namespace {

// ---- when an algorithm applies ------------------------------------------------------------------

bool sharedMemory(const Shape& s) { return s.size > 1 && s.oneHost() && s.arenaReady(); }
bool singleCopy(const Shape& s) { return sharedMemory(s) && s.crossMemoryAttach(); }
// Ring algorithms cut the buffer into one block per rank.
bool oneElementPerRank(const Shape& s) { return s.count >= size_t(s.size); }

// ---- when the default rule wants it (the switch points come from the benchmark) -----------------

bool fromShmMin(const Shape& s) { return s.bytes >= settings().shmMinBytes; }
// Where the arena did not time one copy slow against two through a slot (NodeArena::singleCopyFast). Scatter
// and all-to-all took one copy at nearly every size measured, 2 and 4 ranks, on both VM kinds seen
// (README, "Algorithms"). Never for the steps of a hierarchical schedule: there a node step that waits
// for its readers holds up the fragments behind it (2 hosts x 2 ranks at 2 Gbit/s: an allgather of 1 or 8
// MiB at 37% and 84-93% of the link in two runs of three, where the slots keep every cell at 95%).
bool singleCopyTimedFast(const Shape& s) { return !s.step && s.singleCopyFast(); }
// Gather with every rank writing its own part into the root's output (write_copy) took 0.49-0.78 of the
// slots' time on 2 ranks and 0.44-1.00 on 4 ranks on the 2 cores: wanted wherever scatter takes one copy.
bool fromShmMinSingleCopyFast(const Shape& s) { return fromShmMin(s) && singleCopyTimedFast(s); }
// Broadcast and allgather with one copy keep every rank until all its readers are done, which lost with
// 4 ranks on the 2 cores (up to 1.7x from 256 KiB): only where every rank has a core of its own. There,
// broadcast's split_copy (the copying shared between the root and its readers) took 0.35-0.72 of the time
// of the default before it at every size from 64 KiB to 16 MiB on 2 ranks (two alternated pairs,
// torch_hier.bench), and allgather's single_copy 0.59-0.87 of the slots' time at 64 KiB-1 MiB, 0.66-0.85
// at 4-16 MiB (four alternated pairs) and 0.70-1.05 at 32-64 MiB (two), where an earlier bound at 2 MiB
// had left the slots.
bool waitedOnCopyWanted(const Shape& s) { return fromShmMin(s) && singleCopyTimedFast(s) && s.coreForEachRank(); }
// Allreduce with one copy each way (single_copy) against the slots, 2 ranks, process_group_bench, eight
// alternated pairs on a VM with 2 MiB of L2 a core: 0.49-0.88 of the slots' time at 4 MiB in every pair,
// 0.58-1.09 at 16 MiB (better in six), but 0.95-1.65 at 1 MiB (worse in four of five) and 0.89-1.44 at
// 64 MiB (worse in six); with 4 ranks on the 2 cores no better anywhere from 256 KiB (two pairs). Its copy
// of a peer's reduced part comes from memory where the slots' chunks stay in the cache, and that stops
// paying once the buffer no longer fits the cache.
constexpr size_t kAllreduceSingleCopyMinBytes = size_t(4) << 20;
constexpr size_t kAllreduceSingleCopyMaxBytes = size_t(16) << 20;
bool allreduceSingleCopyWanted(const Shape& s) {
  return s.bytes >= kAllreduceSingleCopyMinBytes && s.bytes <= kAllreduceSingleCopyMaxBytes && singleCopyTimedFast(s) &&
         s.coreForEachRank();
}
// The root reducing alone from the others' slots (shm_root) took 0.34-0.98 of the time of the slots'
// reduce, which shares the reducing out, at every size from 64 KiB to 64 MiB on 2 ranks, and 0.63-1.25 on
// 4 ranks on the 2 cores (README, "Algorithms"): it copies only the others' inputs, once, and they copy
// the next chunk while the root reduces. The root reduces every input itself, so with more ranks on as
// many cores sharing should win; where is not measured: beyond kReduceAtRootMaxRanks the slots' way stays.
constexpr int kReduceAtRootMaxRanks = 4;
bool fewRanksFromShmMin(const Shape& s) { return fromShmMin(s) && s.size <= kReduceAtRootMaxRanks; }
bool fromAllreduceRingMin(const Shape& s) { return s.bytes >= settings().allreduceRingMinBytes; }
bool fromReduceRingMin(const Shape& s) { return s.bytes >= settings().reduceRingMinBytes; }
bool fromBroadcastChainMin(const Shape& s) { return s.bytes >= settings().broadcastChainMinBytes; }
bool fromAllgatherRingMin(const Shape& s) { return s.bytes >= settings().allgatherRingMinBytes; }

NodeArena& arenaOf(Collective& c) {
  auto* arena = c.group().arena(c.deadline());
  if (arena == nullptr) throw Error(ErrorKind::Internal, "the shared-memory arena is not there");
  return *arena;
}

// ---- the tables ----------------------------------------------------------------------------------

const FlatAllreduce kAllreduce[] = {
    {"single_copy", singleCopy, allreduceSingleCopyWanted,
     [](Collective& c, const Buffer& data, ReduceOp op) { shm::allreduceSingleCopy(c, arenaOf(c), data, op); }},
    {"shm", sharedMemory, fromShmMin,
     [](Collective& c, const Buffer& data, ReduceOp op) { shm::allreduce(c, arenaOf(c), data, op); }},
    {"ring", oneElementPerRank, fromAllreduceRingMin,
     [](Collective& c, const Buffer& data, ReduceOp op) {
       algorithms::allreduceRing(c, data, op, settings().pipelineChunkBytes);
     }},
    {"recursive_doubling", always, always, algorithms::allreduceRecursiveDoubling},
};

const FlatReduce kReduce[] = {
    {"shm_root", sharedMemory, fewRanksFromShmMin,
     [](Collective& c, const Buffer& in, const Buffer& out, ReduceOp op, int root) {
       shm::reduceAtRoot(c, arenaOf(c), in, out, op, root);
     }},
    {"shm", sharedMemory, fromShmMin,
     [](Collective& c, const Buffer& in, const Buffer& out, ReduceOp op, int root) {
       shm::reduce(c, arenaOf(c), in, out, op, root);
     }},
    {"ring", oneElementPerRank, fromReduceRingMin,
     [](Collective& c, const Buffer& in, const Buffer& out, ReduceOp op, int root) {
       algorithms::reduceRing(c, in, out, op, root, settings().pipelineChunkBytes);
     }},
    {"binomial", always, always, algorithms::reduceBinomial},
};

const FlatBroadcast kBroadcast[] = {
    {"split_copy", singleCopy, waitedOnCopyWanted,
     [](Collective& c, const Buffer& data, int root) { shm::broadcastSplitCopy(c, arenaOf(c), data, root); }},
    {"single_copy", singleCopy, never,
     [](Collective& c, const Buffer& data, int root) { shm::broadcastSingleCopy(c, arenaOf(c), data, root); }},
    {"shm", sharedMemory, fromShmMin,
     [](Collective& c, const Buffer& data, int root) { shm::broadcast(c, arenaOf(c), data, root); }},
    {"chain", always, fromBroadcastChainMin,
     [](Collective& c, const Buffer& data, int root) {
       algorithms::broadcastChain(c, data, root, settings().pipelineChunkBytes);
     }},
    {"binomial", always, always, algorithms::broadcastBinomial},
};

const FlatAllgather kAllgather[] = {
    {"single_copy", singleCopy, waitedOnCopyWanted,
     [](Collective& c, const Buffer& in, const std::vector<Buffer>& outs) {
       shm::allgatherSingleCopy(c, arenaOf(c), in, outs);
     }},
    {"shm", sharedMemory, fromShmMin,
     [](Collective& c, const Buffer& in, const std::vector<Buffer>& outs) { shm::allgather(c, arenaOf(c), in, outs); }},
    {"ring", always, fromAllgatherRingMin, algorithms::allgatherRing},
    {"direct", always, always, algorithms::allgatherDirect},
};

const FlatGather kGather[] = {
    {"write_copy", singleCopy, fromShmMinSingleCopyFast,
     [](Collective& c, const Buffer& in, const std::vector<Buffer>& outs, int root) {
       shm::gatherWriteCopy(c, arenaOf(c), in, outs, root);
     }},
    {"shm", sharedMemory, fromShmMin,
     [](Collective& c, const Buffer& in, const std::vector<Buffer>& outs, int root) {
       shm::gather(c, arenaOf(c), in, outs, root);
     }},
    {"linear", always, always, algorithms::gatherLinear},
};

const FlatScatter kScatter[] = {
    {"single_copy", singleCopy, fromShmMinSingleCopyFast,
     [](Collective& c, const std::vector<Buffer>& ins, const Buffer& out, int root) {
       shm::scatterSingleCopy(c, arenaOf(c), ins, out, root);
     }},
    {"shm", sharedMemory, fromShmMin,
     [](Collective& c, const std::vector<Buffer>& ins, const Buffer& out, int root) {
       shm::scatter(c, arenaOf(c), ins, out, root);
     }},
    {"linear", always, always, algorithms::scatterLinear},
};

const FlatReduceScatter kReduceScatter[] = {
    {"shm", sharedMemory, fromShmMin,
     [](Collective& c, const std::vector<Buffer>& ins, const Buffer& out, ReduceOp op) {
       shm::reduceScatter(c, arenaOf(c), ins, out, op);
     }},
    {"direct", always, never, algorithms::reduceScatterDirect},
    {"ring", always, always,
     [](Collective& c, const std::vector<Buffer>& ins, const Buffer& out, ReduceOp op) {
       algorithms::reduceScatterRing(c, ins, out, op, settings().pipelineChunkBytes);
     }},
};

// The ranks of an all-to-all pass different sizes, so nothing size-dependent can choose: on one host
// the arena takes it (by one copy where that was not timed slow), elsewhere pairwise. Every algorithm
// checks every pair's sizes on every rank before any data moves (split_sizes.h).
const FlatAlltoall kAlltoall[] = {
    {"single_copy", singleCopy, singleCopyTimedFast,
     [](Collective& c, const std::vector<Buffer>& ins, const std::vector<Buffer>& outs,
        const std::vector<uint64_t>* known) { shm::alltoallSingleCopy(c, arenaOf(c), ins, outs, known); }},
    {"shm", sharedMemory, always,
     [](Collective& c, const std::vector<Buffer>& ins, const std::vector<Buffer>& outs,
        const std::vector<uint64_t>* known) { shm::alltoall(c, arenaOf(c), ins, outs, known); }},
    {"pairwise", always, always, algorithms::alltoallPairwise},
};

const FlatBarrier kBarrier[] = {
    {"dissemination", always, always, algorithms::barrierDissemination},
};

}  // namespace

std::span<const FlatAllreduce> flatAllreduceRows() { return kAllreduce; }
std::span<const FlatReduce> flatReduceRows() { return kReduce; }
std::span<const FlatBroadcast> flatBroadcastRows() { return kBroadcast; }
std::span<const FlatAllgather> flatAllgatherRows() { return kAllgather; }
std::span<const FlatGather> flatGatherRows() { return kGather; }
std::span<const FlatScatter> flatScatterRows() { return kScatter; }
std::span<const FlatReduceScatter> flatReduceScatterRows() { return kReduceScatter; }
std::span<const FlatAlltoall> flatAlltoallRows() { return kAlltoall; }
std::span<const FlatBarrier> flatBarrierRows() { return kBarrier; }

const char* toString(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::Allreduce: return "allreduce";
    case CollectiveKind::Reduce: return "reduce";
    case CollectiveKind::Broadcast: return "broadcast";
    case CollectiveKind::Allgather: return "allgather";
    case CollectiveKind::Gather: return "gather";
    case CollectiveKind::Scatter: return "scatter";
    case CollectiveKind::ReduceScatter: return "reduce_scatter";
    case CollectiveKind::Alltoall: return "alltoall";
    case CollectiveKind::Barrier: return "barrier";
  }
  return "unknown";
}

}  // namespace hier::transport
