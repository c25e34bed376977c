// What torch's profiler shows of each operation, as for Gloo's and NCCL's: a record_param_comms event
// naming the group, the op, the element counts and the dtype. Made only while somebody profiles or
// traces (torch.profiler, the execution trace observer): it costs about a microsecond.
#pragma once

#include <ATen/record_function.h>
#include <torch/csrc/distributed/c10d/ParamCommsUtils.hpp>

#include <string>
#include <tuple>
#include <vector>

namespace hier {

// The group as the profiler names it; its members' global ranks as a start and a stride (torch's
// convention), both -1 when they are not evenly spaced.
struct ProfiledGroup {
  std::string name;
  std::string description;
  int rank = 0;
  int size = 1;
  int globalRankStart = 0;
  int globalRankStride = 1;
};

int64_t elementsOf(c10::ArrayRef<at::Tensor> tensors);
// The first defined tensor's dtype (bytes when there is none, as for a barrier).
at::ScalarType dtypeOf(c10::ArrayRef<at::Tensor> inputs, c10::ArrayRef<at::Tensor> outputs);

// `issue(profiling)`, inside the operation's event while somebody profiles (`profiling` true then);
// `describe()` gives the ProfiledGroup, asked for only then.
template <typename Describe, typename Issue>
auto profiled(Describe&& describe, uint64_t sequence, const char* op, c10::ArrayRef<at::Tensor> inputs,
              c10::ArrayRef<at::Tensor> outputs, Issue&& issue) {
  if (!at::hasCallbacks()) return issue(false);
  const ProfiledGroup group = describe();
  RECORD_PARAM_COMMS_DATA(static_cast<int64_t>(sequence), std::make_tuple(group.name, group.description), inputs.vec(),
                          outputs.vec(), group.rank, op, elementsOf(inputs), elementsOf(outputs),
                          dtypeOf(inputs, outputs), std::vector<int64_t>(), std::vector<int64_t>(),
                          group.globalRankStart, group.globalRankStride, group.size);
  return issue(true);
}

}  // namespace hier
