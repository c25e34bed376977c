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

// Device memory reaches a sub-group only in a byte-moving network step (ucx/cuda_direct.h): messages.
bool sharedMemory(const Shape& s) {
  return s.size > 1 && s.memory == MemoryType::Host && s.oneHost() && s.arenaReady();
}
bool singleCopy(const Shape& s) { return sharedMemory(s) && s.crossMemoryAttach(); }
// Ring algorithms cut the buffer into one block per rank.
bool oneElementPerRank(const Shape& s) { return s.count >= size_t(s.size); }

// ---- when the default rule wants it (the switch points come from the benchmark) -----------------

bool fromShmMin(const Shape& s) { return s.bytes >= settings().shmMinBytes; }
// One copy where the arena did not time it slow against two through a slot (NodeArena::singleCopyFast);
// never in the steps of a hierarchical schedule, where a node step that waits for its readers holds up
// the fragments behind it (docs/measurements.md has the figures for every predicate here).
bool singleCopyTimedFast(const Shape& s) { return !s.step && s.singleCopyFast(); }
bool fromShmMinSingleCopyFast(const Shape& s) { return fromShmMin(s) && singleCopyTimedFast(s); }
// Broadcast's and allgather's one copy keep every rank until all its readers are done: only where every
// rank has a core of its own.
bool waitedOnCopyWanted(const Shape& s) { return fromShmMin(s) && singleCopyTimedFast(s) && s.coreForEachRank(); }
// Allreduce's one copy reads a peer's reduced part from memory where the slots' chunks stay in the cache:
// it pays only while the buffer fits the cache, and where every rank has a core.
constexpr size_t kAllreduceSingleCopyMinBytes = size_t(4) << 20;
constexpr size_t kAllreduceSingleCopyMaxBytes = size_t(16) << 20;
bool allreduceSingleCopyWanted(const Shape& s) {
  return s.bytes >= kAllreduceSingleCopyMinBytes && s.bytes <= kAllreduceSingleCopyMaxBytes && singleCopyTimedFast(s) &&
         s.coreForEachRank();
}
// The root reducing alone from the others' slots (shm_root) copies only their inputs, once; with many
// ranks on as many cores sharing the reducing should win, and where is not measured: beyond
// kReduceAtRootMaxRanks the slots' way stays.
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
