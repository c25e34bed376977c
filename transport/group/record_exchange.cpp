#include "transport/group/record_exchange.h"

#include <cstring>
#include <memory>
#include <numeric>

#include "transport/base/error.h"

namespace hier::transport {

std::vector<BruckStep> bruckSteps(int size) {
  std::vector<BruckStep> steps;
  for (int held = 1; held < size; held += steps.back().count) steps.push_back({held, std::min(held, size - held)});
  return steps;
}

namespace {

// One step's pair of messages: `sent` to rank - distance, `received` from rank + distance.
void exchangeStep(Communicator& communicator, int distance, const void* sent, size_t sentBytes, void* received,
                  size_t receivedBytes, uint64_t tag, const Deadline& deadline, std::shared_ptr<const void> keep) {
  const int n = communicator.size(), r = communicator.rank();
  const int to = (r + n - distance) % n, from = (r + distance) % n;
  std::vector<RequestPtr> requests{communicator.receive({from, received, receivedBytes, MemoryType::Host,
                                                         tag | uint64_t(from), deadline.when, keep}),
                                   communicator.send({to, const_cast<void*>(sent), sentBytes, MemoryType::Host,
                                                      tag | uint64_t(r), deadline.when, keep})};
  communicator.engine().wait(requests);
  for (auto& request : requests) {
    if (request->succeeded()) continue;
    const int peer = communicator.nameOf(request->isReceive ? from : to);
    const std::string what = std::string(request->isReceive ? "receiving from" : "sending to") + " rank " +
                             std::to_string(peer) + " while the group's ranks learned each other's hosts";
    if (request->errorKind() == ErrorKind::Timeout) {
      throw Error(ErrorKind::Timeout,
                  deadline.timedOut() + " waiting for rank " + std::to_string(peer) + " (" + what + ")", {peer});
    }
    throw Error(request->errorKind(), what + ": " + request->errorMessage(), {peer});
  }
}

}  // namespace

std::vector<std::vector<uint8_t>> exchangeRecords(Communicator& communicator, const std::vector<uint8_t>& mine,
                                                  uint64_t lengthsTag, uint64_t recordsTag, const Deadline& deadline) {
  const int n = communicator.size(), r = communicator.rank();
  if (n == 1) return {mine};
  ucx::Engine::Driving driving(communicator.engine());
  const auto steps = bruckSteps(n);

  // Lengths first, in holding order (index i: rank r + i), so that every receive has its exact size. The
  // buffers outlive a timeout: UCX may still write into them, and the requests keep them.
  auto lengths = std::make_shared<std::vector<uint64_t>>(size_t(n), 0);
  (*lengths)[0] = mine.size();
  for (const auto& step : steps) {
    exchangeStep(communicator, step.distance, lengths->data(), size_t(step.count) * sizeof(uint64_t),
                 lengths->data() + step.distance, size_t(step.count) * sizeof(uint64_t), lengthsTag, deadline, lengths);
  }
  std::vector<size_t> offsets(size_t(n) + 1, 0);
  for (int i = 0; i < n; ++i) offsets[size_t(i) + 1] = offsets[size_t(i)] + size_t((*lengths)[size_t(i)]);

  auto records = std::make_shared<std::vector<uint8_t>>(offsets.back());
  std::memcpy(records->data(), mine.data(), mine.size());
  for (const auto& step : steps) {
    const size_t first = offsets[size_t(step.distance)], last = offsets[size_t(step.distance + step.count)];
    exchangeStep(communicator, step.distance, records->data(), offsets[size_t(step.count)], records->data() + first,
                 last - first, recordsTag, deadline, records);
  }

  std::vector<std::vector<uint8_t>> byRank(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    byRank[size_t((r + i) % n)].assign(records->begin() + long(offsets[size_t(i)]),
                                       records->begin() + long(offsets[size_t(i) + 1]));
  }
  return byRank;
}

std::vector<uint8_t> encodeRecord(const PeerRecord& record) {
  const uint32_t hostBytes = uint32_t(record.host.size());
  std::vector<uint8_t> bytes(sizeof hostBytes + record.host.size() + record.address.size());
  std::memcpy(bytes.data(), &hostBytes, sizeof hostBytes);
  std::memcpy(bytes.data() + sizeof hostBytes, record.host.data(), record.host.size());
  std::memcpy(bytes.data() + sizeof hostBytes + record.host.size(), record.address.data(), record.address.size());
  return bytes;
}

PeerRecord decodeRecord(const std::vector<uint8_t>& bytes) {
  uint32_t hostBytes = 0;
  if (bytes.size() < sizeof hostBytes) throw Error(ErrorKind::Internal, "a peer record is too short");
  std::memcpy(&hostBytes, bytes.data(), sizeof hostBytes);
  if (bytes.size() - sizeof hostBytes < hostBytes) throw Error(ErrorKind::Internal, "a peer record is cut short");
  const auto host = bytes.begin() + sizeof hostBytes;
  return {std::string(host, host + hostBytes), std::vector<uint8_t>(host + hostBytes, bytes.end())};
}

}  // namespace hier::transport
