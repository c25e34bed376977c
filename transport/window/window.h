// A one-sided window: memory each rank of a communicator exposes for the others to write into, and
// signals that tell a rank that a peer's writes landed there.
//
//   put          writes into a peer's memory through UCX (RMA), then signals the peer once the write is
//                visible there (UCX's flush of the endpoint, then a message)
//   signal       the signal alone, after every earlier write to that peer
//   waitSignal   consumes the next signal from a peer, however long ago it came
//
// A signal is a message in the rail sub-group id's point-to-point space (tag.h), slot `number`: UCX
// keeps signals that came before their wait, in order, and waits for one inherit the engine's
// deadlines and its watch on the peer. Writes into host memory only; no rank writes into its own. A
// window that lets its memory go (the destructor) does not stop peers that still write into it: the
// ranks agree when first (the plugin deregisters behind a barrier).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "transport/base/deadline.h"
#include "transport/group/communicator.h"
#include "transport/group/point_to_point.h"
#include "transport/ucx/engine.h"

namespace hier::transport {

class Window {
 public:
  // This rank's part: `bytes` at `data` (none: peers can only signal it). Collective in two steps: every
  // rank's descriptor() goes to every rank (the caller gathers them), then each calls connect().
  // `number` tells this window's signals from those of the communicator's other windows.
  Window(Communicator& communicator, uint32_t number, void* data, size_t bytes);
  Window(const Window&) = delete;
  Window& operator=(const Window&) = delete;

  // What a peer needs to write here: this rank's address, length and UCX key.
  std::vector<uint8_t> descriptor() const;
  // Takes every rank's descriptor, by rank, and connects to the peers that expose memory.
  void connect(const std::vector<std::vector<uint8_t>>& descriptors, const Deadline& deadline);
  // How many bytes `rank` exposes; valid after connect().
  size_t bytesOf(int rank) const { return bytes_.at(size_t(rank)); }

  // `onSettled` as PointToPoint's: it runs where the transfer settles and must only hand the news on.
  // `keepalive` holds `data` until UCX is done with it.
  using OnSettled = std::function<void(const TransferOutcome&)>;
  std::shared_ptr<Transfer> put(const void* data, size_t bytes, int rank, size_t offset,
                                std::shared_ptr<const void> keepalive, const Deadline& deadline, OnSettled onSettled);
  std::shared_ptr<Transfer> signal(int rank, const Deadline& deadline, OnSettled onSettled);
  std::shared_ptr<Transfer> waitSignal(int rank, const Deadline& deadline, OnSettled onSettled);

 private:
  // Throws InvalidUsage unless `rank` is another rank of the connected window.
  void checkPeer(int rank) const;
  uint64_t signalTag(int source) const;
  Communicator::Message signalMessage(int rank, const Deadline& deadline, OnSettled onSettled, bool receiving) const;

  Communicator& communicator_;
  const uint32_t number_;
  void* const data_;
  std::unique_ptr<ucx::Engine::ExposedMemory> exposed_;  // null when this rank exposes nothing
  std::vector<uint64_t> addresses_;                      // by rank, after connect()
  std::vector<size_t> bytes_;
  std::vector<std::shared_ptr<ucx::Engine::RemoteKey>> keys_;
};

}  // namespace hier::transport
