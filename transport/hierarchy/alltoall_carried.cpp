// Carried all-to-all (across hosts, host memory): the parts one host sends another cross the network
// bundled, one message per pair of carriers (and fragment) instead of one per pair of ranks. A carrier
// is the rank of a host that bundles the parts its host sends to some ranks of each other host, and
// hands out the parts that arrive for them:
//
//   rails    local rank l carries for the ranks with place l (uniform layouts): one bundle per rail and
//            host pair, every rank's link busy.
//   leaders  each host's first rank carries for all of its ranks (any layout): one bundle per host
//            pair, each part copied once more on either host.
//
// Three steps, each with its own tag, over the host's node group, the carriers' network group and the
// node group again: (1) every rank sends each part for another host to the part's carrier on its own
// host, which lays the parts out as one bundle per destination host (parts for its own host go straight
// to their rank); (2) the carriers exchange bundles; (3) a carrier hands each arrived part to its rank,
// or finds it already in place: a bundle of one fragment whose parts are all the carrier's own and lie
// back to back in its outputs (alltoall_single's, when a host's ranks are consecutive) lands there.
//
// Large bundles go in fragments (HIER_HIERARCHY_FRAGMENT_BYTES; every part cut into as many, fragment f
// of a bundle holding fragment f of each of its parts), so that the network carries fragment f while
// the host gathers fragment f + 1 and hands out fragment f - 1. One thread drives it all: every receive
// is posted first, then step 1 two fragments at a time, each fragment's bundles leaving as soon as it
// is gathered, then the parts that stay on this host, then step 3 fragment by fragment as they arrive.
// Every rank knows every part's size (split_sizes.h, or the caller's), so both ends of a message lay
// it out alike, and no empty piece is a message.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "transport/base/error.h"
#include "transport/group/collective.h"
#include "transport/hierarchy/node_steps.h"
#include "transport/hierarchy/pipeline.h"
#include "transport/message_algorithms/split_sizes.h"

namespace hier::transport::hierarchy {
namespace {

// Who carries: local rank l for the ranks with place l, or each host's first rank for all of its ranks.
enum class Carriers { Rails, Leaders };

struct Part {
  int from = 0, to = 0;    // ranks of the whole group
  std::vector<Range> cut;  // its fragments, in bytes
};

// One carrier's parts from one host to another, in bundle order, and where each fragment starts in
// the carrier's copy (fragment after fragment).
struct Bundle {
  std::vector<Part> parts;
  std::vector<size_t> start;  // by fragment, plus the end
  size_t bytes(size_t f) const { return start[f + 1] - start[f]; }
};

// Calls `piece(part, offset in the part, offset in the bundle, bytes)` for fragment f's non-empty pieces.
template <typename Piece>
void forEachPiece(const Bundle& b, size_t f, Piece piece) {
  size_t at = b.start[f];
  for (const Part& part : b.parts) {
    const Range& r = part.cut[f];
    if (r.count != 0) piece(part, r.offset, at, r.count);
    at += r.count;
  }
}

void alltoallCarried(Collective& c, Carriers carriers, const std::vector<Buffer>& inputs,
                     const std::vector<Buffer>& outputs, const std::vector<uint64_t>* known) {
  const std::vector<uint64_t> sizes = algorithms::splitSizeTable(c, inputs, outputs, known);
  const Topology& t = c.group().topology(c.deadline());
  const int me = c.rank(), home = t.node(), place = t.localRank(), hosts = t.nodeCount();
  const size_t n = size_t(c.size()), hostCount = size_t(hosts);
  auto bytesBetween = [&](int from, int to) { return size_t(sizes[2 * n * size_t(from) + size_t(to)]); };
  auto carrierOf = [&](int placeOnHost) { return carriers == Carriers::Rails ? placeOnHost : 0; };
  if (carriers == Carriers::Rails && !t.uniform()) {
    throw Error(ErrorKind::Internal, "alltoall=rails needs as many ranks on every host: " + t.describe());
  }
  // What host `from`'s carrier `k` sends host `to`'s carrier: for each rank of `to` that k carries, in
  // place order, the parts from each rank of `from`, in place order.
  auto partsOf = [&](int from, int to, int k) {
    std::vector<Part> parts;
    for (size_t p = 0; p < t.nodes[size_t(to)].size(); ++p) {
      if (carrierOf(int(p)) != k) continue;
      for (int source : t.nodes[size_t(from)]) parts.push_back({source, t.nodes[size_t(to)][p], {}});
    }
    return parts;
  };
  // Every rank cuts alike: as many fragments as the largest bundle of any carrier needs.
  size_t largest = 0;
  for (int from = 0; from < hosts; ++from) {
    for (int to = 0; to < hosts; ++to) {
      if (from == to) continue;
      for (size_t k = 0; k < t.nodes[size_t(to)].size(); ++k) {
        size_t bytes = 0;
        for (const Part& part : partsOf(from, to, int(k))) bytes += bytesBetween(part.from, part.to);
        largest = std::max(largest, bytes);
      }
    }
  }
  const size_t fragments = fragmentCount(largest, largest);
  auto bundle = [&](int from, int to, int k) {
    Bundle b{partsOf(from, to, k), std::vector<size_t>(fragments + 1, 0)};
    for (Part& part : b.parts) {
      part.cut = fragmentRanges(bytesBetween(part.from, part.to), fragments);
      for (size_t f = 0; f < fragments; ++f) b.start[f + 1] += part.cut[f].count;
    }
    for (size_t f = 0; f < fragments; ++f) b.start[f + 1] += b.start[f];
    return b;
  };
  // Where an arriving fragment can land in `outputs` as it is (every piece is this rank's and lies where
  // the fragment's layout puts it), or null.
  auto inPlace = [&](const Bundle& b, size_t f) -> char* {
    uintptr_t start = 0;
    bool possible = true;
    forEachPiece(b, f, [&](const Part& part, size_t partOffset, size_t at, size_t) {
      const uintptr_t here =
          reinterpret_cast<uintptr_t>(outputs[size_t(part.from)].bytePtr()) + partOffset - (at - b.start[f]);
      possible = possible && part.to == me && (start == 0 || here == start);
      start = here;
    });
    return possible ? reinterpret_cast<char*>(start) : nullptr;
  };

  // This rank's bundles, when it carries: outgoing (gathered in step 1) and incoming (step 2), by host;
  // where each fragment lies (scratch, or for incoming ones possibly the outputs).
  const bool carrying = carriers == Carriers::Rails || place == 0;
  std::vector<Bundle> outgoing(hostCount), incoming(hostCount);
  std::vector<char*> outgoingAt(hostCount, nullptr);
  std::vector<std::vector<char*>> incomingAt(hostCount, std::vector<char*>(fragments, nullptr));
  std::vector<std::vector<bool>> landsInPlace(hostCount, std::vector<bool>(fragments, false));
  if (carrying) {
    size_t scratchBytes = 0;
    std::vector<size_t> outgoingOffset(hostCount);
    std::vector<std::vector<size_t>> incomingOffset(hostCount, std::vector<size_t>(fragments));
    for (int h = 0; h < hosts; ++h) {
      if (h == home) continue;
      outgoing[size_t(h)] = bundle(home, h, place);
      outgoingOffset[size_t(h)] = scratchBytes;
      scratchBytes += outgoing[size_t(h)].start.back();
      incoming[size_t(h)] = bundle(h, home, place);
      for (size_t f = 0; f < fragments; ++f) {
        incomingAt[size_t(h)][f] = inPlace(incoming[size_t(h)], f);
        landsInPlace[size_t(h)][f] = incomingAt[size_t(h)][f] != nullptr;
        if (landsInPlace[size_t(h)][f]) continue;
        incomingOffset[size_t(h)][f] = scratchBytes;
        scratchBytes += incoming[size_t(h)].bytes(f);
      }
    }
    char* scratch = c.scratch(std::max<size_t>(scratchBytes, 1));
    for (int h = 0; h < hosts; ++h) {
      if (h == home) continue;
      outgoingAt[size_t(h)] = scratch + outgoingOffset[size_t(h)];
      for (size_t f = 0; f < fragments; ++f) {
        if (!landsInPlace[size_t(h)][f]) incomingAt[size_t(h)][f] = scratch + incomingOffset[size_t(h)][f];
      }
    }
  }

  Group& node = c.group().node(c.deadline());
  Group* network = carriers == Carriers::Rails ? &c.group().rail(c.deadline()) : c.group().leaders(c.deadline());
  // Every member of a group makes its steps in the same order: the node group's two on every rank, the
  // network group's on its members. A host's group ranks are its places; a network group's, its hosts.
  Collective gathering(node, c);
  Collective handing(node, c);
  std::optional<Collective> exchanging;
  if (carrying) exchanging.emplace(*network, c);
  std::vector<RequestPtr> direct, sent, handed;
  std::vector<std::vector<RequestPtr>> gathered(fragments), arrived(fragments);
  auto localOf = [&](int rank) { return t.localRankOf[size_t(rank)]; };
  // This rank's own parts, cut as the bundles cut them: what it sends, by target; receives, by source.
  std::vector<std::vector<Range>> inputCut, outputCut;
  for (size_t r = 0; r < n; ++r) {
    inputCut.push_back(fragmentRanges(inputs[r].bytes(), fragments));
    outputCut.push_back(fragmentRanges(outputs[r].bytes(), fragments));
  }

  // Receives first. Between two ranks, each step's messages go in one order, which both ends follow:
  // fragment by fragment, host by host, in bundle order; then the parts for this host.
  for (size_t f = 0; carrying && f < fragments; ++f) {
    for (int h = 0; h < hosts; ++h) {
      if (h == home) continue;
      if (incoming[size_t(h)].bytes(f) != 0) {
        arrived[f].push_back(exchanging->receive(h, incomingAt[size_t(h)][f], incoming[size_t(h)].bytes(f)));
      }
      forEachPiece(outgoing[size_t(h)], f, [&](const Part& part, size_t, size_t at, size_t bytes) {
        if (part.from != me) {
          gathered[f].push_back(gathering.receive(localOf(part.from), outgoingAt[size_t(h)] + at, bytes));
        }
      });
    }
  }
  for (int source : t.nodes[size_t(home)]) {
    const Buffer& out = outputs[size_t(source)];
    if (source != me && out.bytes() != 0) direct.push_back(gathering.receive(localOf(source), out));
  }
  const int myCarrier = carrierOf(place);
  for (size_t f = 0; myCarrier != place && f < fragments; ++f) {
    for (int h = 0; h < hosts; ++h) {
      if (h == home) continue;
      for (int source : t.nodes[size_t(h)]) {
        const Range& r = outputCut[size_t(source)][f];
        if (r.count != 0) {
          handed.push_back(handing.receive(myCarrier, outputs[size_t(source)].bytePtr() + r.offset, r.count));
        }
      }
    }
  }

  // Step 1, fragment f: this rank's pieces to their carriers (or into its own bundles).
  auto gather = [&](size_t f) {
    for (int h = 0; h < hosts; ++h) {
      if (h == home) continue;
      for (size_t p = 0; p < t.nodes[size_t(h)].size(); ++p) {
        const int target = t.nodes[size_t(h)][p];
        const Range& r = inputCut[size_t(target)][f];
        if (r.count != 0 && carrierOf(int(p)) != place) {
          gathered[f].push_back(
              gathering.send(carrierOf(int(p)), inputs[size_t(target)].bytePtr() + r.offset, r.count));
        }
      }
      if (!carrying) continue;
      forEachPiece(outgoing[size_t(h)], f, [&](const Part& part, size_t partOffset, size_t at, size_t bytes) {
        if (part.from == me) {
          std::memcpy(outgoingAt[size_t(h)] + at, inputs[size_t(part.to)].bytePtr() + partOffset, bytes);
        }
      });
    }
  };
  // Step 2, fragment f: once gathered, its bundles leave.
  auto exchange = [&](size_t f) {
    gathering.wait(gathered[f]);
    for (int h = 0; carrying && h < hosts; ++h) {
      if (h == home || outgoing[size_t(h)].bytes(f) == 0) continue;
      sent.push_back(
          exchanging->send(h, outgoingAt[size_t(h)] + outgoing[size_t(h)].start[f], outgoing[size_t(h)].bytes(f)));
    }
  };
  // Two fragments gather at a time: with all of them posted at once the host would move them side by
  // side and finish the first no sooner than the last, leaving the network idle until then.
  for (size_t f = 0; f < fragments; ++f) {
    gather(f);
    if (f > 0) exchange(f - 1);
  }
  exchange(fragments - 1);
  // The parts for this host, while the network carries the bundles.
  for (size_t p = 0; p < t.nodes[size_t(home)].size(); ++p) {
    const int target = t.nodes[size_t(home)][p];
    const Buffer& in = inputs[size_t(target)];
    if (in.bytes() == 0) continue;
    if (target != me) {
      direct.push_back(gathering.send(int(p), in));
    } else if (outputs[size_t(me)].data != in.data) {
      std::memmove(outputs[size_t(me)].data, in.data, in.bytes());
    }
  }

  // Step 3: each arrived fragment's parts to their ranks; the network carries the later ones meanwhile.
  for (size_t f = 0; carrying && f < fragments; ++f) {
    exchanging->wait(arrived[f]);
    for (int h = 0; h < hosts; ++h) {
      if (h == home || landsInPlace[size_t(h)][f]) continue;
      const Bundle& b = incoming[size_t(h)];
      const char* base = incomingAt[size_t(h)][f];
      forEachPiece(b, f, [&](const Part& part, size_t partOffset, size_t at, size_t bytes) {
        const char* piece = base + (at - b.start[f]);
        if (part.to == me) {
          std::memcpy(outputs[size_t(part.from)].bytePtr() + partOffset, piece, bytes);
        } else {
          handed.push_back(handing.send(localOf(part.to), piece, bytes));
        }
      });
    }
  }
  if (carrying) exchanging->wait(sent);
  gathering.wait(direct);
  handing.wait(handed);
}

}  // namespace

void alltoallRails(Collective& c, const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs,
                   const std::vector<uint64_t>* known) {
  alltoallCarried(c, Carriers::Rails, inputs, outputs, known);
}

void alltoallLeaders(Collective& c, const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs,
                     const std::vector<uint64_t>* known) {
  alltoallCarried(c, Carriers::Leaders, inputs, outputs, known);
}

}  // namespace hier::transport::hierarchy
