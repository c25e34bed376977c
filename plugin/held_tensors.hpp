// Where hier lets go of a caller's tensors.
//
// Letting go of the last reference to a tensor whose Python object died while hier held it (a temporary
// passed to an asynchronous call, as in all_to_all_single(torch.empty(n), t, async_op=True)) frees that
// Python object, which takes the GIL. On one of hier's own threads (a group's executor, UCX's progress
// thread, a pipeline's network stage, the CUDA watchdog) that is a wait for whatever Python runs
// meanwhile, and fatal while the interpreter shuts down: Python ends a thread that asks for the GIL then
// (pthread_exit), and the unwind through the releasing destructor, which is noexcept, aborts the process
// ("terminate called without an active exception"). So what such a thread would let go of is kept for
// the next caller's thread that calls into hier (releaseDeferred), or for the process's end.
//
// What runs an operation lets go of its tensors before the operation completes, so that the caller that
// waits for it lets go of them before wait() returns (WorkHier::wait calls releaseDeferred).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/SmallVector.h>

namespace hier {

// A caller's tensors, held while an operation runs: by its work, its task and UCX's requests, through a
// shared_ptr that the last of them lets go of.
struct HeldTensors {
  HeldTensors() = default;
  HeldTensors(const HeldTensors&) = delete;
  HeldTensors& operator=(const HeldTensors&) = delete;
  ~HeldTensors();

  c10::SmallVector<at::Tensor, 4> tensors;
};

// On one of hier's own threads: takes a reference to each of `tensors` (to `future`, which holds
// tensors) for the next caller's thread to let go of (releaseDeferred), so that the references this
// thread is about to let go of are not the last. Elsewhere: nothing.
void deferRelease(c10::ArrayRef<at::Tensor> tensors);
void deferRelease(const c10::intrusive_ptr<c10::ivalue::Future>& future);
// Lets go of what hier's own threads deferred. Called on a caller's thread: at every operation, when a
// wait or a poll finds its work done, at shutdown. Costs one atomic load when nothing was deferred.
void releaseDeferred();

}  // namespace hier
