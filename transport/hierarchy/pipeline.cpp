#include "transport/hierarchy/pipeline.h"

#include <algorithm>

#include "transport/base/helper_thread.h"
#include "transport/base/settings.h"

namespace hier::transport::hierarchy {

size_t fragmentCount(size_t bytes, size_t count, size_t minElements) {
  const size_t fragmentBytes = settings().hierarchyFragmentBytes;
  size_t fragments = (bytes + fragmentBytes - 1) / fragmentBytes;
  fragments = std::min(fragments, count / std::max<size_t>(minElements, 1));
  return std::max<size_t>(fragments, 1);
}

std::vector<Range> fragmentRanges(size_t count, size_t fragments) { return evenRanges(count, int(fragments)); }

std::vector<std::vector<Range>> fragmentParts(size_t count, size_t elementBytes, int parts) {
  std::vector<std::vector<Range>> cut;
  for (const auto& f : fragmentRanges(count, fragmentCount(count * elementBytes, count, size_t(parts)))) {
    cut.push_back(evenRanges(f.count, parts));
    for (auto& part : cut.back()) part.offset += f.offset;
  }
  return cut;
}

NetworkStage::NetworkStage(size_t fragments, std::function<void(size_t)> step, Group* network)
    : fragments_(fragments), step_(std::move(step)), network_(network), threaded_(step_ && fragments > 1) {
  if (threaded_) thread_ = std::thread([this] { run(); });
}

NetworkStage::~NetworkStage() {
  if (!threaded_) return;
  bool stepping = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stepping = !finished_ && !error_ && done_ < released_;
    finished_ = true;  // a thread waiting for a release gives up
  }
  changed_.notify_all();
  // A network step waits on peers that will not come now that this rank gave up on the collective.
  if (stepping && network_ != nullptr) network_->abort("the collective failed on this rank's node");
  thread_.join();
}

void NetworkStage::run() {
  markHelperThread();
  for (size_t f = 0; f < fragments_; ++f) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return released_ > f || finished_; });
      if (finished_) return;
    }
    try {
      step_(f);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      changed_.notify_all();
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = f + 1;
    changed_.notify_all();
  }
}

void NetworkStage::release(size_t fragment) {
  if (!step_) return;
  if (!threaded_) return step_(fragment);
  std::lock_guard<std::mutex> lock(mutex_);
  released_ = std::max(released_, fragment + 1);
  changed_.notify_all();
}

void NetworkStage::releaseAll() {
  if (!threaded_) {
    for (size_t f = 0; step_ && f < fragments_; ++f) step_(f);
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  released_ = fragments_;
  changed_.notify_all();
}

void NetworkStage::await(size_t fragment) {
  if (!threaded_) return;
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return done_ > fragment || error_; });
  if (error_) {
    finished_ = true;
    std::rethrow_exception(error_);
  }
  if (done_ == fragments_) finished_ = true;
}

void runCollectNetworkSpread(NodeSteps& node, size_t fragments, const std::function<void(size_t)>& collect,
                             std::function<void(size_t)> network, Group* networkGroup,
                             const std::function<void(size_t)>& spread) {
  if (node.pass() == NodeSteps::Pass::Enqueue) {
    // A rank outside the network stage has nothing to wait for: its spread waits on the device for the
    // peers whose network step it needs (their node steps).
    for (size_t f = 0; f < fragments; ++f) {
      collect(f);
      if (f == 0) continue;
      if (network) node.gate(f - 1);
      spread(f - 1);
    }
    if (network) node.gate(fragments - 1);
    spread(fragments - 1);
    return;
  }
  if (node.pass() == NodeSteps::Pass::Network) {
    if (!network) return;
    try {
      for (size_t f = 0; f < fragments; ++f) {
        network(f);
        node.open(f);
      }
    } catch (...) {
      node.openAll();
      throw;
    }
    return;
  }
  NetworkStage stage(fragments, std::move(network), networkGroup);
  for (size_t f = 0; f < fragments; ++f) {
    collect(f);
    stage.release(f);
    if (f > 0) {
      stage.await(f - 1);
      spread(f - 1);
    }
  }
  stage.await(fragments - 1);
  spread(fragments - 1);
}

}  // namespace hier::transport::hierarchy
