// How a hierarchical schedule overlaps its network stage with its node stages.
//
// The buffer is cut into fragments (HIER_HIERARCHY_FRAGMENT_BYTES). The network step of each fragment
// (a collective on the rail or leaders group) runs on a second thread, fragment after
// fragment, while the calling thread runs the node steps (node collectives, node_steps.h) of
// the fragments before and after it. Each group is used by one thread only, in an order fixed
// by the fragment numbers, so every rank runs the same collectives on it in the same order.
//
// With one fragment there is nothing to overlap: the network step runs on the calling thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "transport/base/even_ranges.h"
#include "transport/group/group.h"
#include "transport/hierarchy/node_steps.h"

namespace hier::transport::hierarchy {

// How many fragments a schedule moving `bytes` (in `count` elements) cuts them into: enough that none
// is larger than HIER_HIERARCHY_FRAGMENT_BYTES, but no more than count / minElements (each fragment
// keeps at least `minElements` elements, e.g. one per rank of the node it is split among). At least 1.
size_t fragmentCount(size_t bytes, size_t count, size_t minElements = 1);

// `count` elements cut into `fragments` ranges, as evenly as evenRanges does.
std::vector<Range> fragmentRanges(size_t count, size_t fragments);

// The split-rail cut of `count` elements of `elementBytes`: fragments (fragmentCount, at least one
// element per part), each split evenly into `parts` parts; offsets into the whole buffer. The host and
// device split-rail schedules both cut this way.
std::vector<std::vector<Range>> fragmentParts(size_t count, size_t elementBytes, int parts);

class NetworkStage {
 public:
  // `step(f)` is the network step of fragment f; an empty `step` means this rank takes no part in the
  // network stage (then release and await do nothing). `network` is the sub-group the steps use:
  // when the calling thread gives up (its node step threw), it is aborted so a step waiting on peers
  // returns at once rather than at the deadline.
  NetworkStage(size_t fragments, std::function<void(size_t)> step, Group* network);
  // Joins the thread; aborts `network` first when the stage was not awaited to its end.
  ~NetworkStage();
  NetworkStage(const NetworkStage&) = delete;
  NetworkStage& operator=(const NetworkStage&) = delete;

  // The node steps fragment f's network step needs are done: it may start. In fragment order.
  void release(size_t fragment);
  // Every fragment may start (a network stage that needs nothing from the node steps).
  void releaseAll();
  // Blocks until fragment f's network step is done; rethrows the first step's error.
  void await(size_t fragment);

 private:
  void run();

  const size_t fragments_;
  const std::function<void(size_t)> step_;
  Group* const network_;
  const bool threaded_;

  std::mutex mutex_;
  std::condition_variable changed_;
  size_t released_ = 0;  // fragments below this may start
  size_t done_ = 0;      // fragments below this are done
  std::exception_ptr error_;
  bool finished_ = false;  // the caller awaited the last fragment
  std::thread thread_;
};

// The shape of every schedule: for each fragment, a node step that gathers (`collect`), a network
// step, a node step that spreads the result (`spread`). An empty `network`: this rank takes no part in
// the network stage. By `node`'s pass (node_steps.h):
//   Whole    the calling thread runs collect(f), then spread(f - 1), while the network step of f - 1
//            and then f runs beside it;
//   Enqueue  collect(f), then gate(f - 1) and spread(f - 1), the same order with the waits for the
//            network left to the device; no network step;
//   Network  the network steps in order, each opening its gate; every gate opened if one throws.
void runCollectNetworkSpread(NodeSteps& node, size_t fragments, const std::function<void(size_t)>& collect,
                             std::function<void(size_t)> network, Group* networkGroup,
                             const std::function<void(size_t)>& spread);

}  // namespace hier::transport::hierarchy
