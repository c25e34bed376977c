// Every rank's record to every rank in ceil(log2 n) steps (Bruck's all-gather), for what the ranks of a
// group learn of each other when it is first used (their hosts, their UCX addresses). A rank reads the
// store only for the addresses of the ranks it sends to here, O(log n) of them, where reading every
// rank's keys would take n reads per rank and n^2 at the store's one server.
//
// A rank holds its own record and the next ones in rank order, modulo n; in each step it passes the first
// `count` of them to rank - distance and takes as many from rank + distance, which extends what it holds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "transport/base/deadline.h"
#include "transport/group/communicator.h"

namespace hier::transport {

struct BruckStep {
  int distance;  // the records held before the step
  int count;     // the records passed in the step
};
std::vector<BruckStep> bruckSteps(int size);

// Collective over `communicator`: every rank calls it with its own record and gets every rank's, by rank.
// The two tags lie outside every other operation's (their source bits 0): the records' lengths travel
// with the first, the records with the second. Throws Error naming the rank it could not hear from.
std::vector<std::vector<uint8_t>> exchangeRecords(Communicator& communicator, const std::vector<uint8_t>& mine,
                                                  uint64_t lengthsTag, uint64_t recordsTag, const Deadline& deadline);

// What a rank tells the others about itself when a group is first used.
struct PeerRecord {
  std::string host;
  std::vector<uint8_t> address;  // its UCX worker's
};
std::vector<uint8_t> encodeRecord(const PeerRecord& record);
// Throws Error(Internal) on bytes that encodeRecord did not make.
PeerRecord decodeRecord(const std::vector<uint8_t>& bytes);

}  // namespace hier::transport
