// CudaPath's collectives: each asks its collective's table (transport/select/algorithm_table.h), as a
// call on host memory does, with the call's shape in device memory, and hands the work to the road of
// the row it gets: onNccl, acrossHosts (the row's hierarchical schedule) or staged (cuda_path.hpp). The
// calls arrive validated.
#include <ATen/ops/empty.h>
#include <ATen/ops/view_as_real.h>
#include <c10/cuda/CUDAGuard.h>

#include "plugin/cuda/cuda_path.hpp"
#include "plugin/tensors.hpp"
#include "transport/select/algorithm_table.h"

namespace hier {
namespace {

using transport::Buffer;
using transport::DataType;
using transport::MemoryType;
namespace nccl = transport::nccl;
using transport::CollectiveKind;
using transport::Road;

size_t bytesOf(const at::Tensor& t) { return size_t(t.numel()) * t.element_size(); }

bool isComplex(const at::Tensor& t) { return at::isComplexType(t.scalar_type()); }

// Complex tensors go to NCCL, and to the hierarchical schedules, as pairs of reals.
at::Tensor realView(const at::Tensor& t) { return isComplex(t) ? at::view_as_real(t) : t; }

// What a list of tensors comes to, as the table's shape counts it: bytes, and elements with complex
// numbers as pairs of reals.
struct Extent {
  size_t bytes = 0;
  size_t count = 0;
};
Extent extentOf(const std::vector<at::Tensor>& tensors) {
  Extent extent;
  for (const auto& t : tensors) {
    extent.bytes += bytesOf(t);
    extent.count += size_t(realView(t).numel());
  }
  return extent;
}

// NCCL's view of a reduction of `tensor` by the group's communicator (of `ranks`): the element type it
// reduces and how; nothing when NCCL cannot take it (a non-contiguous tensor, int16, a bitwise op,
// PRODUCT/MIN/MAX of complex numbers): then the staged path reduces it on the host, which has every op.
// `scaleAfter`: a factor NCCL cannot apply right (one rank, nccl::scalesOnOneRank): NCCL copies, and
// finish() scales the output on the stream.
struct NcclReduction {
  DataType dtype;
  transport::Reduction how;
  std::optional<double> scaleAfter;
};
std::optional<NcclReduction> ncclReduction(const at::Tensor& tensor, const host::Reduction& reduction, int ranks) {
  if (!tensor.is_contiguous()) return std::nullopt;
  auto dtype = reductionType(realView(tensor).scalar_type());
  if (!dtype || !nccl::dataType(*dtype)) return std::nullopt;
  if (isComplex(tensor) && reduction.op != transport::ReduceOp::Sum && reduction.op != transport::ReduceOp::Avg) {
    return std::nullopt;
  }
  if (reduction.premultiply) {
    if (!nccl::scales(*dtype)) return std::nullopt;
    if (ranks == 1 && !nccl::scalesOnOneRank(nccl::versionCode())) {
      return NcclReduction{*dtype, {transport::ReduceOp::Sum, std::nullopt}, reduction.premultiply};
    }
    return NcclReduction{*dtype, {transport::ReduceOp::Sum, reduction.premultiply}, std::nullopt};
  }
  if (!nccl::mapReduction(reduction.op, *dtype).op) return std::nullopt;
  return NcclReduction{*dtype, {reduction.op, std::nullopt}, std::nullopt};
}

// What NCCL left to do to `output` on `stream`: the scale it could not apply (NcclReduction::scaleAfter).
void finish(const NcclReduction& r, const at::Tensor& output, cudaStream_t stream) {
  if (!r.scaleAfter) return;
  c10::cuda::CUDAStreamGuard onStream(c10::cuda::getStreamFromExternal(stream, output.device().index()));
  output.mul_(*r.scaleAfter);
}

// NCCL moves these as they are: contiguous, on one device.
bool ncclMoves(const std::vector<at::Tensor>& tensors) {
  for (const auto& t : tensors) {
    if (!t.is_contiguous() || t.device() != tensors.front().device()) return false;
  }
  return true;
}

Buffer deviceBuffer(const at::Tensor& t, DataType dtype) {
  return Buffer{t.data_ptr(), size_t(realView(t).numel()), dtype, MemoryType::Cuda};
}

Buffer deviceBytes(const at::Tensor& t) { return Buffer{t.data_ptr(), bytesOf(t), DataType::UInt8, MemoryType::Cuda}; }

// `whole` cut into `parts` equal consecutive pieces.
std::vector<Buffer> pieces(const Buffer& whole, int parts) {
  std::vector<Buffer> cut;
  const size_t count = whole.count / size_t(parts);
  for (int p = 0; p < parts; ++p) cut.push_back(whole.slice(size_t(p) * count, count));
  return cut;
}

}  // namespace

transport::Shape CudaPath::shapeOf(size_t bytes, size_t count, bool ncclTakes, size_t tensors) {
  transport::Shape shape{bytes, count, core_.size(), &topology()};
  shape.memory = MemoryType::Cuda;
  shape.ncclTakes = ncclTakes;
  shape.tensors = tensors;
  return shape;
}

template <typename Row>
const Row& CudaPath::chosen(const Call& call, CollectiveKind kind, std::span<const Row> table,
                            const transport::Shape& shape) {
  try {
    return transport::choose(kind, table, shape);
  } catch (const transport::Error& error) {
    core_.invalid(call.op, error.what());  // a HIER_ALGORITHMS item that cannot serve the call
  }
}

CudaPath::Work CudaPath::allreduce(const at::Tensor& tensor, const host::Reduction& reduction, const Call& call) {
  const auto r = ncclReduction(tensor, reduction, core_.size());
  const auto& row = chosen(call, CollectiveKind::Allreduce, transport::allreduceTable(),
                           shapeOf(bytesOf(tensor), size_t(realView(tensor).numel()), r.has_value()));
  switch (row.road) {
    case Road::Nccl:
      return onNccl(call, {tensor}, {tensor},
                    [tensor, r](cudaStream_t stream, nccl::Communicator& comm, const auto& d) {
                      const Buffer data = deviceBuffer(tensor, r->dtype);
                      comm.allReduce(data.data, data.data, data.count, data.dtype, r->how, stream, d);
                      finish(*r, tensor, stream);
                    });
    case Road::Schedule:
      return acrossHosts(call, {tensor}, {tensor},
                         [tensor, r, reduction, schedule = row.schedule](auto& c, auto& node) {
                           schedule(c, node, deviceBuffer(tensor, r->dtype), reduction.op, reduction.premultiply);
                         });
    default: break;  // staged
  }
  return staged(call, tensor.device(), {tensor}, {tensor}, /*inPlace=*/true,
                [reduction](const auto& in, const auto&) { return host::allreduce(in[0], reduction); });
}

CudaPath::Work CudaPath::allreduceCoalesced(const std::vector<at::Tensor>& tensors,
                                            const std::vector<host::Reduction>& reductions, const Call& call) {
  // One tensor is an allreduce, whose roads include the schedules across hosts.
  if (tensors.size() == 1) return allreduce(tensors[0], reductions[0], call);
  std::vector<NcclReduction> rs;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (auto r = ncclReduction(tensors[i], reductions[i], core_.size())) rs.push_back(*r);
  }
  const bool ncclTakes = rs.size() == tensors.size() && ncclMoves(tensors);
  const Extent all = extentOf(tensors);
  const auto& row = chosen(call, CollectiveKind::Allreduce, transport::allreduceTable(),
                           shapeOf(all.bytes, all.count, ncclTakes, tensors.size()));
  if (row.road == Road::Nccl) {
    return onNccl(call, tensors, tensors, [tensors, rs](cudaStream_t stream, nccl::Communicator& comm, const auto& d) {
      comm.grouped(
          [&] {
            for (size_t i = 0; i < tensors.size(); ++i) {
              const Buffer data = deviceBuffer(tensors[i], rs[i].dtype);
              comm.allReduce(data.data, data.data, data.count, data.dtype, rs[i].how, stream, d);
            }
          },
          d);
      for (size_t i = 0; i < tensors.size(); ++i) finish(rs[i], tensors[i], stream);
    });
  }
  return staged(call, tensors.front().device(), tensors, tensors, /*inPlace=*/true,
                [reductions](const auto& in, const auto&) { return host::allreduceCoalesced(in, reductions); });
}

CudaPath::Work CudaPath::broadcast(const at::Tensor& tensor, int root, const Call& call) {
  const auto& row = chosen(call, CollectiveKind::Broadcast, transport::broadcastTable(),
                           shapeOf(bytesOf(tensor), bytesOf(tensor), ncclMoves({tensor})));
  switch (row.road) {
    case Road::Nccl:
      return onNccl(
          call, {tensor}, {tensor}, [tensor, root](cudaStream_t stream, nccl::Communicator& comm, const auto& d) {
            comm.broadcast(tensor.data_ptr(), tensor.data_ptr(), bytesOf(tensor), DataType::UInt8, root, stream, d);
          });
    case Road::Schedule:
      return acrossHosts(call, {tensor}, {tensor}, [tensor, root, schedule = row.schedule](auto& c, auto& node) {
        schedule(c, node, deviceBytes(tensor), root);
      });
    default: break;  // staged
  }
  const bool isRoot = core_.rank() == root;
  return staged(call, tensor.device(), {tensor}, {tensor}, /*inPlace=*/true,
                [root, isRoot](const auto& in, const auto&) { return host::broadcast(in[0], root, isRoot); });
}

CudaPath::Work CudaPath::reduce(const at::Tensor& tensor, const host::Reduction& reduction, int root,
                                const Call& call) {
  const auto r = ncclReduction(tensor, reduction, core_.size());
  const auto& row = chosen(call, CollectiveKind::Reduce, transport::reduceTable(),
                           shapeOf(bytesOf(tensor), size_t(realView(tensor).numel()), r.has_value()));
  switch (row.road) {
    case Road::Nccl:
      return onNccl(call, {tensor}, {tensor},
                    [tensor, r, root](cudaStream_t stream, nccl::Communicator& comm, const auto& d) {
                      const Buffer data = deviceBuffer(tensor, r->dtype);
                      comm.reduce(data.data, data.data, data.count, data.dtype, r->how, root, stream, d);
                      finish(*r, tensor, stream);  // one rank, the root, when there is anything to finish
                    });
    case Road::Schedule:
      return acrossHosts(call, {tensor}, {tensor},
                         [tensor, r, reduction, root, schedule = row.schedule](auto& c, auto& node) {
                           const Buffer data = deviceBuffer(tensor, r->dtype);
                           schedule(c, node, data, data, reduction.op, root, reduction.premultiply);
                         });
    default: break;  // staged
  }
  const bool isRoot = core_.rank() == root;
  return staged(
      call, tensor.device(), {tensor}, {tensor}, /*inPlace=*/true,
      [reduction, root, isRoot](const auto& in, const auto&) { return host::reduce(in[0], reduction, root, isRoot); });
}

CudaPath::Work CudaPath::allgather(const at::Tensor& input, const std::vector<at::Tensor>& outputs, const Call& call) {
  // The list form has no NCCL road here yet: the table gives it staging.
  chosen(call, CollectiveKind::Allgather, transport::allgatherTable(),
         shapeOf(bytesOf(input) * outputs.size(), 0, false));
  return staged(call, input.device(), {input}, outputs, /*inPlace=*/false,
                [](const auto& in, const auto& out) { return host::allgather(in[0], out); });
}

CudaPath::Work CudaPath::allgatherIntoTensor(const std::vector<at::Tensor>& inputs,
                                             const std::vector<at::Tensor>& outputs, const Call& call) {
  std::vector<at::Tensor> all = inputs;
  all.insert(all.end(), outputs.begin(), outputs.end());
  const size_t bytes = extentOf(outputs).bytes;  // moved as bytes: as many elements
  // Across hosts the rails schedule takes one tensor at a time (Shape::tensors): the coalesced form is
  // staged there.
  const auto& row = chosen(call, CollectiveKind::Allgather, transport::allgatherTable(),
                           shapeOf(bytes, bytes, ncclMoves(all), inputs.size()));
  const int n = core_.size();
  switch (row.road) {
    case Road::Nccl:
      return onNccl(call, inputs, outputs,
                    [inputs, outputs](cudaStream_t stream, nccl::Communicator& comm, const auto& d) {
                      comm.grouped(
                          [&] {
                            for (size_t i = 0; i < inputs.size(); ++i) {
                              comm.allGather(inputs[i].data_ptr(), outputs[i].data_ptr(), bytesOf(inputs[i]),
                                             DataType::UInt8, stream, d);
                            }
                          },
                          d);
                    });
    case Road::Schedule:
      return acrossHosts(call, inputs, outputs,
                         [input = inputs[0], output = outputs[0], n, schedule = row.schedule](auto& c, auto& node) {
                           schedule(c, node, deviceBytes(input), pieces(deviceBytes(output), n));
                         });
    default: break;  // staged
  }
  return staged(call, inputs.front().device(), inputs, outputs, /*inPlace=*/false,
                [n](const auto& in, const auto& out) { return host::allgatherIntoTensor(in, out, n); });
}

CudaPath::Work CudaPath::gather(const at::Tensor& input, const std::vector<at::Tensor>& outputs, int root,
                                const Call& call) {
  chosen(call, CollectiveKind::Gather, transport::gatherTable(), shapeOf(bytesOf(input), 0, false));
  return staged(call, input.device(), {input}, outputs, /*inPlace=*/false,
                [root](const auto& in, const auto& out) { return host::gather(in[0], out, root); });
}

CudaPath::Work CudaPath::scatter(const std::vector<at::Tensor>& inputs, const at::Tensor& output, int root,
                                 const Call& call) {
  chosen(call, CollectiveKind::Scatter, transport::scatterTable(), shapeOf(bytesOf(output), 0, false));
  return staged(call, output.device(), inputs, {output}, /*inPlace=*/false,
                [root](const auto& in, const auto& out) { return host::scatter(in, out[0], root); });
}

CudaPath::Work CudaPath::reduceScatter(const std::vector<at::Tensor>& inputs, const at::Tensor& output,
                                       const host::Reduction& reduction, const Call& call) {
  // The list form has no NCCL road here yet: the table gives it staging.
  chosen(call, CollectiveKind::ReduceScatter, transport::reduceScatterTable(),
         shapeOf(bytesOf(output) * inputs.size(), 0, false));
  return staged(call, output.device(), inputs, {output}, /*inPlace=*/false,
                [reduction](const auto& in, const auto& out) { return host::reduceScatter(in, out[0], reduction); });
}

CudaPath::Work CudaPath::reduceScatterTensor(const std::vector<at::Tensor>& inputs,
                                             const std::vector<at::Tensor>& outputs,
                                             const std::vector<host::Reduction>& reductions, const Call& call) {
  std::vector<NcclReduction> rs;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (auto r = ncclReduction(outputs[i], reductions[i], core_.size())) rs.push_back(*r);
  }
  std::vector<at::Tensor> all = inputs;
  all.insert(all.end(), outputs.begin(), outputs.end());
  const bool ncclTakes = rs.size() == outputs.size() && ncclMoves(all);
  const Extent in = extentOf(inputs);
  const auto& row = chosen(call, CollectiveKind::ReduceScatter, transport::reduceScatterTable(),
                           shapeOf(in.bytes, in.count, ncclTakes, inputs.size()));
  const int n = core_.size();
  switch (row.road) {
    case Road::Nccl:
      return onNccl(
          call, inputs, outputs, [inputs, outputs, rs](cudaStream_t stream, nccl::Communicator& comm, const auto& d) {
            comm.grouped(
                [&] {
                  for (size_t i = 0; i < inputs.size(); ++i) {
                    const Buffer out = deviceBuffer(outputs[i], rs[i].dtype);
                    comm.reduceScatter(inputs[i].data_ptr(), out.data, out.count, out.dtype, rs[i].how, stream, d);
                  }
                },
                d);
            for (size_t i = 0; i < outputs.size(); ++i) finish(rs[i], outputs[i], stream);
          });
    case Road::Schedule:
      return acrossHosts(call, inputs, outputs,
                         [input = inputs[0], output = outputs[0], r = rs[0], reduction = reductions[0], n,
                          schedule = row.schedule](auto& c, auto& node) {
                           schedule(c, node, pieces(deviceBuffer(input, r.dtype), n), deviceBuffer(output, r.dtype),
                                    reduction.op, reduction.premultiply);
                         });
    default: break;  // staged
  }
  return staged(
      call, outputs.front().device(), inputs, outputs, /*inPlace=*/false,
      [reductions, n](const auto& in, const auto& out) { return host::reduceScatterTensor(in, out, reductions, n); });
}

CudaPath::Work CudaPath::alltoallSingle(const at::Tensor& input, const at::Tensor& output,
                                        const std::vector<int64_t>& inRows, const std::vector<int64_t>& outRows,
                                        const Call& call) {
  const bool alias = input.storage().is_alias_of(output.storage());
  const auto& row = chosen(call, CollectiveKind::Alltoall, transport::alltoallTable(),
                           shapeOf(0, 0, ncclMoves({input, output}) && !alias));
  if (row.road == Road::Nccl) {
    auto offsets = [](const at::Tensor& t, const std::vector<int64_t>& rows, std::vector<size_t>& starts,
                      std::vector<size_t>& sizes) {
      const size_t row = t.size(0) ? bytesOf(t) / size_t(t.size(0)) : 0;
      size_t at = 0;
      for (int64_t r : rows) {
        starts.push_back(at);
        sizes.push_back(size_t(r) * row);
        at += size_t(r) * row;
      }
    };
    std::vector<size_t> sendStarts, sendSizes, recvStarts, recvSizes;
    offsets(input, inRows, sendStarts, sendSizes);
    offsets(output, outRows, recvStarts, recvSizes);
    return onNccl(call, {input}, {output}, [=](cudaStream_t stream, nccl::Communicator& comm, const auto& d) {
      comm.grouped(
          [&] {
            for (size_t p = 0; p < sendSizes.size(); ++p) {
              if (sendSizes[p] > 0) {
                comm.send(static_cast<const char*>(input.data_ptr()) + sendStarts[p], sendSizes[p], int(p), stream, d);
              }
              if (recvSizes[p] > 0) {
                comm.recv(static_cast<char*>(output.data_ptr()) + recvStarts[p], recvSizes[p], int(p), stream, d);
              }
            }
          },
          d);
    });
  }
  return staged(call, input.device(), {input}, {output}, /*inPlace=*/false,
                [inRows, outRows](const auto& in, const auto& out) {
                  return host::alltoallSingle(in[0], out[0], inRows, outRows);
                });
}

CudaPath::Work CudaPath::alltoall(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                                  const Call& call) {
  // The list form has no NCCL road here yet: the table gives it staging.
  chosen(call, CollectiveKind::Alltoall, transport::alltoallTable(), shapeOf(0, 0, false));
  return staged(call, inputs.front().device(), inputs, outputs, /*inPlace=*/false,
                [](const auto& in, const auto& out) { return host::alltoall(in, out); });
}

CudaPath::Work CudaPath::barrier(const c10::Device& where, const Call& call) {
  // As ProcessGroupNCCL's (its barrier is a device allreduce that the host then waits for): on one host
  // a one-element NCCL allreduce; across hosts the host first waits for the current stream (the device
  // work issued before the barrier is done), then runs the group's CPU barrier.
  const auto& row = chosen(call, CollectiveKind::Barrier, transport::barrierTable(), shapeOf(0, 0, true));
  if (row.road == Road::Nccl) {
    // A one-element allreduce on the current stream; the work is a blocking one: wait() waits for the
    // device, as ProcessGroupNCCL's barrier does.
    at::Tensor token = at::empty({1}, at::TensorOptions().dtype(at::kFloat).device(where));
    Call onCurrent = call;
    onCurrent.asyncOp = false;
    return onNccl(onCurrent, {token}, {token}, [token](cudaStream_t stream, nccl::Communicator& comm, const auto& d) {
      comm.allReduce(token.data_ptr(), token.data_ptr(), 1, DataType::Float32, {}, stream, d);
    });
  }
  // Across hosts: the host first waits for what the current stream holds (staged's copy-out event, with
  // nothing to copy), then the group's CPU barrier; wait() waits for all of it.
  Call onCurrent = call;
  onCurrent.asyncOp = false;
  return staged(onCurrent, where, {}, {}, /*inPlace=*/false, [](const auto&, const auto&) { return host::barrier(); });
}

}  // namespace hier
