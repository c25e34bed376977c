// Streams a group holds for itself alone. torch's pool hands its streams round-robin to every caller
// (32 a device and priority), so two groups, or a group and a `torch.cuda.Stream()` of the program's,
// can land on one stream and queue behind each other's work: with several groups in flight (FSDP2 + TP,
// HSDP, pipelines) that orders NCCL calls of different communicators on one stream, which can hang. So
// each group leases streams of hier's own: made when none is free, handed back when the group closes,
// never destroyed (the caching allocator may still record events on a stream after the tensors that
// used it are gone). Torch-free and CUDA-free, so the CPU tests check the bookkeeping.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

namespace hier::cuda_plan {

// A stream's CUDA priority: the greatest the device offers when the group's options ask for high
// priority (Options.is_high_priority_stream, as ProcessGroupNCCL's), else the least (CUDA numbers
// priorities downwards: `greatest` is the smaller number).
inline int streamPriority(bool high, int least, int greatest) { return high ? greatest : least; }

template <typename Stream>
class StreamLeases {
 public:
  // A stream of `device` and `priority` nobody holds: a free one, else `make()`.
  Stream acquire(int device, int priority, const std::function<Stream()>& make) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& free = free_[{device, priority}];
      if (!free.empty()) {
        Stream stream = free.back();
        free.pop_back();
        return stream;
      }
    }
    return make();
  }
  // `stream` is free again (its group closed; work it still holds runs first on it).
  void release(int device, int priority, Stream stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_[{device, priority}].push_back(stream);
  }
  size_t freeCount(int device, int priority) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find({device, priority});
    return it == free_.end() ? 0 : it->second.size();
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::tuple<int, int>, std::vector<Stream>> free_;
};

}  // namespace hier::cuda_plan
