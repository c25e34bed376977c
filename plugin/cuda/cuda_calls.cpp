// CudaPath's collectives: each asks its collective's table (transport/select/algorithm_table.h), as a
// call on host memory does, with the call's shape in device memory, and hands the work to the road of
// the row it gets: onNccl, acrossHosts (the row's hierarchical schedule) or staged (cuda_path.hpp). The
// calls arrive validated.
#include <ATen/ops/empty.h>
#include <ATen/ops/view_as_real.h>
#include <c10/cuda/CUDACachingAllocator.h>
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
// reduces and how; nothing when NCCL cannot take it (int16, a bitwise op, PRODUCT/MIN/MAX of complex
// numbers: the same on every rank of a valid call): then the staged path reduces it on the host, which has every op.
// `scaleAfter`: a factor NCCL cannot apply right (one rank, nccl::scalesOnOneRank): NCCL copies, and
// finish() scales the output on the stream. `deviceFactor`: PREMUL_SUM's factor left on the device,
// made a scalar of the data's type on the stream as the call is enqueued (howOn), or, one rank, applied
// after as scaleAfter is.
struct NcclReduction {
  DataType dtype;
  transport::Reduction how;
  std::optional<double> scaleAfter;
  at::Tensor deviceFactor;
  bool factorAfter = false;
};
std::optional<NcclReduction> ncclReduction(const at::Tensor& tensor, const host::Reduction& reduction, int ranks) {
  auto dtype = reductionType(realView(tensor).scalar_type());
  if (!dtype || !nccl::dataType(*dtype)) return std::nullopt;
  if (isComplex(tensor) && reduction.op != transport::ReduceOp::Sum && reduction.op != transport::ReduceOp::Avg) {
    return std::nullopt;
  }
  if (reduction.premultiplies()) {
    if (!nccl::scales(*dtype)) return std::nullopt;
    const bool after = ranks == 1 && !nccl::scalesOnOneRank(nccl::versionCode());
    NcclReduction r{*dtype, {transport::ReduceOp::Sum, std::nullopt}, std::nullopt, reduction.deviceFactor, false};
    if (reduction.deviceFactor.defined()) {
      r.factorAfter = after;
    } else if (after) {
      r.scaleAfter = reduction.premultiply;
    } else {
      r.how.scale = reduction.premultiply;
    }
    return r;
  }
  if (!nccl::mapReduction(reduction.op, *dtype).op) return std::nullopt;
  return NcclReduction{*dtype, {reduction.op, std::nullopt}, std::nullopt, {}, false};
}

// The reduction NCCL runs for `r` on `stream`: a factor left on the device becomes a scalar of `data`'s
// element type there, which NCCL reads when its kernel runs; `keep` holds it until the call is enqueued
// (then its memory may go back to the allocator: only later work on the same stream can reuse it).
transport::Reduction howOn(const NcclReduction& r, const at::Tensor& data, cudaStream_t stream,
                           std::vector<at::Tensor>& keep) {
  if (!r.deviceFactor.defined() || r.factorAfter) return r.how;
  auto onStream = c10::cuda::getStreamFromExternal(stream, data.device().index());
  c10::cuda::CUDAStreamGuard guard(onStream);
  c10::cuda::CUDACachingAllocator::recordStream(r.deviceFactor.storage().data_ptr(), onStream);
  keep.push_back(r.deviceFactor.to(data.device(), realView(data).scalar_type()).reshape({1}));
  transport::Reduction how = r.how;
  how.deviceScale = keep.back().data_ptr();
  return how;
}

// What NCCL left to do to `output` on `stream`: the scale it could not apply (NcclReduction::scaleAfter,
// factorAfter).
void finish(const NcclReduction& r, const at::Tensor& output, cudaStream_t stream) {
  if (!r.scaleAfter && !r.factorAfter) return;
  auto onStream = c10::cuda::getStreamFromExternal(stream, output.device().index());
  c10::cuda::CUDAStreamGuard guard(onStream);
  if (r.scaleAfter) {
    output.mul_(*r.scaleAfter);
  } else {
    c10::cuda::CUDACachingAllocator::recordStream(r.deviceFactor.storage().data_ptr(), onStream);
    output.mul_(r.deviceFactor.to(output.device()));
  }
}

// The reduction as a road that scales on the host needs it (a schedule's network step, a staged host
// body): a factor left on the device is read now, which waits for the device. Those roads run on the
// host and cannot be captured in a graph anyway.
host::Reduction onHost(host::Reduction reduction) {
  if (reduction.deviceFactor.defined()) {
    reduction.premultiply = reduction.deviceFactor.item<double>();
    reduction.deviceFactor = at::Tensor();
  }
  return reduction;
}
std::vector<host::Reduction> onHostAll(const std::vector<host::Reduction>& reductions) {
  std::vector<host::Reduction> all;
  for (const auto& reduction : reductions) all.push_back(onHost(reduction));
  return all;
}

// NCCL moves these: on one device (their layout does not matter: DeviceTensors makes them contiguous).
bool oneDevice(const std::vector<at::Tensor>& tensors) {
  for (const auto& t : tensors) {
    if (t.defined() && t.device() != tensors.front().device()) return false;
  }
  return true;
}

Buffer deviceBuffer(const at::Tensor& t, DataType dtype) {
  return Buffer{t.data_ptr(), size_t(realView(t).numel()), dtype, MemoryType::Cuda};
}

Buffer deviceBytes(const at::Tensor& t) { return Buffer{t.data_ptr(), bytesOf(t), DataType::UInt8, MemoryType::Cuda}; }

// `to` gets `from`'s bytes, enqueued on `stream` (the root's own part of a gather or scatter).
void copyOn(cudaStream_t stream, const at::Tensor& from, const at::Tensor& to) {
  if (bytesOf(to) == 0 || to.data_ptr() == from.data_ptr()) return;
  c10::cuda::CUDAStreamGuard onStream(c10::cuda::getStreamFromExternal(stream, to.device().index()));
  to.copy_(from, /*non_blocking=*/true);
}

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
    case Road::Nccl: {
      const DeviceTensors device({tensor}, {tensor}, /*inPlace=*/true);
      return onNccl(call, {tensor}, {tensor}, device,
                    [t = device.inputs[0], r](cudaStream_t stream, nccl::Communicator& comm, const auto& d) {
                      const Buffer data = deviceBuffer(t, r->dtype);
                      std::vector<at::Tensor> keep;
                      comm.allReduce(data.data, data.data, data.count, data.dtype, howOn(*r, t, stream, keep), stream,
                                     d);
                      finish(*r, t, stream);
                    });
    }
    case Road::Schedule: {
      const DeviceTensors device({tensor}, {tensor}, /*inPlace=*/true);
      return acrossHosts(
          call, {tensor}, {tensor}, device,
          [t = device.inputs[0], r, reduction = onHost(reduction), schedule = row.schedule](auto& c, auto& node) {
            schedule(c, node, deviceBuffer(t, r->dtype), reduction.op, reduction.premultiply);
          });
    }
    default: break;  // staged
  }
  return staged(
      call, tensor.device(), {tensor}, {tensor}, /*inPlace=*/true,
      [reduction = onHost(reduction)](const auto& in, const auto&) { return host::allreduce(in[0], reduction); });
}

CudaPath::Work CudaPath::allreduceCoalesced(const std::vector<at::Tensor>& tensors,
                                            const std::vector<host::Reduction>& reductions, const Call& call) {
  // One tensor is an allreduce, whose roads include the schedules across hosts.
  if (tensors.size() == 1) return allreduce(tensors[0], reductions[0], call);
  std::vector<NcclReduction> rs;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (auto r = ncclReduction(tensors[i], reductions[i], core_.size())) rs.push_back(*r);
  }
  const bool ncclTakes = rs.size() == tensors.size() && oneDevice(tensors);
  const Extent all = extentOf(tensors);
  const auto& row = chosen(call, CollectiveKind::Allreduce, transport::allreduceTable(),
                           shapeOf(all.bytes, all.count, ncclTakes, tensors.size()));
  if (row.road == Road::Nccl) {
    const DeviceTensors device(tensors, tensors, /*inPlace=*/true);
    return onNccl(call, tensors, tensors, device,
                  [tensors = device.inputs, rs](cudaStream_t stream, nccl::Communicator& comm, const auto& d) {
                    std::vector<at::Tensor> keep;
                    comm.grouped(
                        [&] {
                          for (size_t i = 0; i < tensors.size(); ++i) {
                            const Buffer data = deviceBuffer(tensors[i], rs[i].dtype);
                            comm.allReduce(data.data, data.data, data.count, data.dtype,
                                           howOn(rs[i], tensors[i], stream, keep), stream, d);
                          }
                        },
                        d);
                    for (size_t i = 0; i < tensors.size(); ++i) finish(rs[i], tensors[i], stream);
                  });
  }
  return staged(call, tensors.front().device(), tensors, tensors, /*inPlace=*/true,
                [reductions = onHostAll(reductions)](const auto& in, const auto&) {
                  return host::allreduceCoalesced(in, reductions);
                });
}

CudaPath::Work CudaPath::broadcast(const at::Tensor& tensor, int root, const Call& call) {
  const auto& row = chosen(call, CollectiveKind::Broadcast, transport::broadcastTable(),
                           shapeOf(bytesOf(tensor), bytesOf(tensor), true));
  switch (row.road) {
    case Road::Nccl: {
      const DeviceTensors device({tensor}, {tensor}, /*inPlace=*/true);
      return onNccl(call, {tensor}, {tensor}, device,
                    [t = device.inputs[0], root](cudaStream_t stream, nccl::Communicator& comm, const auto& d) {
                      comm.broadcast(t.data_ptr(), t.data_ptr(), bytesOf(t), DataType::UInt8, root, stream, d);
                    });
    }
    case Road::Schedule: {
      const DeviceTensors device({tensor}, {tensor}, /*inPlace=*/true);
      return acrossHosts(call, {tensor}, {tensor}, device,
                         [t = device.inputs[0], root, schedule = row.schedule](auto& c, auto& node) {
                           schedule(c, node, deviceBytes(t), root);
                         });
    }
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
    case Road::Nccl: {
      const DeviceTensors device({tensor}, {tensor}, /*inPlace=*/true);
      return onNccl(call, {tensor}, {tensor}, device,
                    [t = device.inputs[0], r, root](cudaStream_t stream, nccl::Communicator& comm, const auto& d) {
                      const Buffer data = deviceBuffer(t, r->dtype);
                      std::vector<at::Tensor> keep;
                      comm.reduce(data.data, data.data, data.count, data.dtype, howOn(*r, t, stream, keep), root,
                                  stream, d);
                      finish(*r, t, stream);  // one rank, the root, when there is anything to finish
                    });
    }
    case Road::Schedule: {
      const DeviceTensors device({tensor}, {tensor}, /*inPlace=*/true);
      return acrossHosts(
          call, {tensor}, {tensor}, device,
          [t = device.inputs[0], r, reduction = onHost(reduction), root, schedule = row.schedule](auto& c, auto& node) {
            const Buffer data = deviceBuffer(t, r->dtype);
            schedule(c, node, data, data, reduction.op, root, reduction.premultiply);
          });
    }
    default: break;  // staged
  }
  const bool isRoot = core_.rank() == root;
  return staged(call, tensor.device(), {tensor}, {tensor}, /*inPlace=*/true,
                [reduction = onHost(reduction), root, isRoot](const auto& in, const auto&) {
                  return host::reduce(in[0], reduction, root, isRoot);
                });
}

CudaPath::Work CudaPath::allgather(const at::Tensor& input, const std::vector<at::Tensor>& outputs, const Call& call) {
  std::vector<at::Tensor> all{input};
  all.insert(all.end(), outputs.begin(), outputs.end());
  const size_t bytes = extentOf(outputs).bytes;  // moved as bytes: as many elements
  const auto& row =
      chosen(call, CollectiveKind::Allgather, transport::allgatherTable(), shapeOf(bytes, bytes, oneDevice(all)));
  switch (row.road) {
    case Road::Nccl: {
      // One broadcast per rank, from its input into everyone's output for it, as one NCCL group: the
      // parts may differ in size, and each output may be anywhere.
      const DeviceTensors device({input}, outputs, /*inPlace=*/false);
      return onNccl(call, {input}, outputs, device,
                    [input = device.inputs[0], outputs = device.outputs, me = core_.rank()](
                        cudaStream_t stream, nccl::Communicator& comm, const auto& d) {
                      comm.grouped(
                          [&] {
                            for (size_t r = 0; r < outputs.size(); ++r) {
                              if (bytesOf(outputs[r]) == 0) continue;  // alike on every rank: the part's size
                              const void* from = int(r) == me ? input.data_ptr() : outputs[r].data_ptr();
                              comm.broadcast(from, outputs[r].data_ptr(), bytesOf(outputs[r]), DataType::UInt8, int(r),
                                             stream, d);
                            }
                          },
                          d);
                    });
    }
    case Road::Schedule: {
      const DeviceTensors device({input}, outputs, /*inPlace=*/false);
      return acrossHosts(
          call, {input}, outputs, device,
          [input = device.inputs[0], outputs = device.outputs, schedule = row.schedule](auto& c, auto& node) {
            std::vector<Buffer> parts;
            for (const auto& out : outputs) parts.push_back(deviceBytes(out));
            schedule(c, node, deviceBytes(input), parts);
          });
    }
    default: break;  // staged
  }
  return staged(call, input.device(), {input}, outputs, /*inPlace=*/false,
                [](const auto& in, const auto& out) { return host::allgather(in[0], out); });
}

CudaPath::Work CudaPath::allgatherCoalesced(const std::vector<at::Tensor>& inputs,
                                            const std::vector<std::vector<at::Tensor>>& outputs, const Call& call) {
  std::vector<at::Tensor> outs;  // rank after rank, as outputs[r][i]
  for (const auto& list : outputs) outs.insert(outs.end(), list.begin(), list.end());
  std::vector<at::Tensor> all = inputs;
  all.insert(all.end(), outs.begin(), outs.end());
  const Extent extent = extentOf(outs);
  const auto& row = chosen(call, CollectiveKind::Allgather, transport::allgatherTable(),
                           shapeOf(extent.bytes, extent.bytes, oneDevice(all), inputs.size()));
  const size_t k = inputs.size();
  if (row.road == Road::Nccl) {
    // Every rank broadcasts each of its inputs into everyone's output for it: one NCCL group.
    const DeviceTensors device(inputs, outs, /*inPlace=*/false);
    return onNccl(call, inputs, outs, device,
                  [inputs = device.inputs, outs = device.outputs, k, me = core_.rank()](
                      cudaStream_t stream, nccl::Communicator& comm, const auto& d) {
                    comm.grouped(
                        [&] {
                          for (size_t j = 0; j < outs.size(); ++j) {
                            const int r = int(j / k);
                            if (bytesOf(outs[j]) == 0) continue;
                            const void* from = r == me ? inputs[j % k].data_ptr() : outs[j].data_ptr();
                            comm.broadcast(from, outs[j].data_ptr(), bytesOf(outs[j]), DataType::UInt8, r, stream, d);
                          }
                        },
                        d);
                  });
  }
  return staged(call, inputs.front().device(), inputs, outs, /*inPlace=*/false, [k](const auto& in, const auto& out) {
    std::vector<std::vector<at::Tensor>> nested;
    for (size_t j = 0; j < out.size(); j += k) nested.emplace_back(out.begin() + long(j), out.begin() + long(j + k));
    return host::allgatherCoalesced(in, nested);
  });
}

CudaPath::Work CudaPath::allgatherIntoTensor(const std::vector<at::Tensor>& inputs,
                                             const std::vector<at::Tensor>& outputs, const Call& call) {
  std::vector<at::Tensor> all = inputs;
  all.insert(all.end(), outputs.begin(), outputs.end());
  const size_t bytes = extentOf(outputs).bytes;  // moved as bytes: as many elements
  // Across hosts the rails schedule takes one tensor at a time (Shape::tensors): the coalesced form is
  // staged there.
  const auto& row = chosen(call, CollectiveKind::Allgather, transport::allgatherTable(),
                           shapeOf(bytes, bytes, oneDevice(all), inputs.size()));
  const int n = core_.size();
  switch (row.road) {
    case Road::Nccl: {
      const DeviceTensors device(inputs, outputs, /*inPlace=*/false);
      return onNccl(call, inputs, outputs, device,
                    [inputs = device.inputs, outputs = device.outputs](cudaStream_t stream, nccl::Communicator& comm,
                                                                       const auto& d) {
                      comm.grouped(
                          [&] {
                            for (size_t i = 0; i < inputs.size(); ++i) {
                              comm.allGather(inputs[i].data_ptr(), outputs[i].data_ptr(), bytesOf(inputs[i]),
                                             DataType::UInt8, stream, d);
                            }
                          },
                          d);
                    });
    }
    case Road::Schedule: {
      const DeviceTensors device(inputs, outputs, /*inPlace=*/false);
      return acrossHosts(
          call, inputs, outputs, device,
          [input = device.inputs[0], output = device.outputs[0], n, schedule = row.schedule](auto& c, auto& node) {
            schedule(c, node, deviceBytes(input), pieces(deviceBytes(output), n));
          });
    }
    default: break;  // staged
  }
  return staged(call, inputs.front().device(), inputs, outputs, /*inPlace=*/false,
                [n](const auto& in, const auto& out) { return host::allgatherIntoTensor(in, out, n); });
}

CudaPath::Work CudaPath::gather(const at::Tensor& input, const std::vector<at::Tensor>& outputs, int root,
                                const Call& call) {
  std::vector<at::Tensor> all{input};
  all.insert(all.end(), outputs.begin(), outputs.end());
  const auto& row = chosen(call, CollectiveKind::Gather, transport::gatherTable(),
                           shapeOf(bytesOf(input) * size_t(core_.size()), 0, oneDevice(all)));
  if (row.road == Road::Nccl) {
    // As ProcessGroupNCCL's: sends to the root and the root's receives, one NCCL group; the root's own
    // part is a copy on the stream.
    const DeviceTensors device({input}, outputs, /*inPlace=*/false);
    return onNccl(call, {input}, outputs, device,
                  [input = device.inputs[0], outputs = device.outputs, root, me = core_.rank(), n = core_.size()](
                      cudaStream_t stream, nccl::Communicator& comm, const auto& d) {
                    comm.grouped(
                        [&] {
                          if (me != root) {
                            if (bytesOf(input) > 0) comm.send(input.data_ptr(), bytesOf(input), root, stream, d);
                            return;
                          }
                          for (int r = 0; r < n; ++r) {
                            if (r != root && bytesOf(outputs[size_t(r)]) > 0)
                              comm.recv(outputs[size_t(r)].data_ptr(), bytesOf(outputs[size_t(r)]), r, stream, d);
                          }
                        },
                        d);
                    if (me == root) copyOn(stream, input, outputs[size_t(root)]);
                  });
  }
  return staged(call, input.device(), {input}, outputs, /*inPlace=*/false,
                [root](const auto& in, const auto& out) { return host::gather(in[0], out, root); });
}

CudaPath::Work CudaPath::scatter(const std::vector<at::Tensor>& inputs, const at::Tensor& output, int root,
                                 const Call& call) {
  std::vector<at::Tensor> all = inputs;
  all.push_back(output);
  const auto& row = chosen(call, CollectiveKind::Scatter, transport::scatterTable(),
                           shapeOf(bytesOf(output) * size_t(core_.size()), 0, oneDevice(all)));
  if (row.road == Road::Nccl) {
    const DeviceTensors device(inputs, {output}, /*inPlace=*/false);
    return onNccl(call, inputs, {output}, device,
                  [inputs = device.inputs, output = device.outputs[0], root, me = core_.rank(), n = core_.size()](
                      cudaStream_t stream, nccl::Communicator& comm, const auto& d) {
                    comm.grouped(
                        [&] {
                          if (me != root) {
                            if (bytesOf(output) > 0) comm.recv(output.data_ptr(), bytesOf(output), root, stream, d);
                            return;
                          }
                          for (int r = 0; r < n; ++r) {
                            if (r != root && bytesOf(inputs[size_t(r)]) > 0)
                              comm.send(inputs[size_t(r)].data_ptr(), bytesOf(inputs[size_t(r)]), r, stream, d);
                          }
                        },
                        d);
                    if (me == root) copyOn(stream, inputs[size_t(root)], output);
                  });
  }
  return staged(call, output.device(), inputs, {output}, /*inPlace=*/false,
                [root](const auto& in, const auto& out) { return host::scatter(in, out[0], root); });
}

CudaPath::Work CudaPath::reduceScatter(const std::vector<at::Tensor>& inputs, const at::Tensor& output,
                                       const host::Reduction& reduction, const Call& call) {
  const auto r = ncclReduction(output, reduction, core_.size());
  std::vector<at::Tensor> all = inputs;
  all.push_back(output);
  const Extent in = extentOf(inputs);
  const auto& row = chosen(call, CollectiveKind::ReduceScatter, transport::reduceScatterTable(),
                           shapeOf(in.bytes, in.count, r.has_value() && oneDevice(all)));
  switch (row.road) {
    case Road::Nccl: {
      // One reduce per rank, of everyone's part for it into its output, as one NCCL group: the parts may
      // differ in size.
      const DeviceTensors device(inputs, {output}, /*inPlace=*/false);
      return onNccl(call, inputs, {output}, device,
                    [inputs = device.inputs, output = device.outputs[0], r](cudaStream_t stream,
                                                                            nccl::Communicator& comm, const auto& d) {
                      std::vector<at::Tensor> keep;
                      const transport::Reduction how = howOn(*r, output, stream, keep);
                      comm.grouped(
                          [&] {
                            for (size_t p = 0; p < inputs.size(); ++p) {
                              const Buffer part = deviceBuffer(inputs[p], r->dtype);
                              if (part.count == 0) continue;
                              comm.reduce(part.data, output.data_ptr(), part.count, part.dtype, how, int(p), stream, d);
                            }
                          },
                          d);
                      finish(*r, output, stream);
                    });
    }
    case Road::Schedule: {
      const DeviceTensors device(inputs, {output}, /*inPlace=*/false);
      return acrossHosts(call, inputs, {output}, device,
                         [inputs = device.inputs, output = device.outputs[0], r, reduction = onHost(reduction),
                          schedule = row.schedule](auto& c, auto& node) {
                           std::vector<Buffer> parts;
                           for (const auto& input : inputs) parts.push_back(deviceBuffer(input, r->dtype));
                           schedule(c, node, parts, deviceBuffer(output, r->dtype), reduction.op,
                                    reduction.premultiply);
                         });
    }
    default: break;  // staged
  }
  return staged(call, output.device(), inputs, {output}, /*inPlace=*/false,
                [reduction = onHost(reduction)](const auto& in, const auto& out) {
                  return host::reduceScatter(in, out[0], reduction);
                });
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
  const bool ncclTakes = rs.size() == outputs.size() && oneDevice(all);
  const Extent in = extentOf(inputs);
  const auto& row = chosen(call, CollectiveKind::ReduceScatter, transport::reduceScatterTable(),
                           shapeOf(in.bytes, in.count, ncclTakes, inputs.size()));
  const int n = core_.size();
  switch (row.road) {
    case Road::Nccl: {
      const DeviceTensors device(inputs, outputs, /*inPlace=*/false);
      return onNccl(call, inputs, outputs, device,
                    [inputs = device.inputs, outputs = device.outputs, rs](cudaStream_t stream,
                                                                           nccl::Communicator& comm, const auto& d) {
                      std::vector<at::Tensor> keep;
                      comm.grouped(
                          [&] {
                            for (size_t i = 0; i < inputs.size(); ++i) {
                              const Buffer out = deviceBuffer(outputs[i], rs[i].dtype);
                              comm.reduceScatter(inputs[i].data_ptr(), out.data, out.count, out.dtype,
                                                 howOn(rs[i], outputs[i], stream, keep), stream, d);
                            }
                          },
                          d);
                      for (size_t i = 0; i < outputs.size(); ++i) finish(rs[i], outputs[i], stream);
                    });
    }
    case Road::Schedule: {
      const DeviceTensors device(inputs, outputs, /*inPlace=*/false);
      return acrossHosts(call, inputs, outputs, device,
                         [input = device.inputs[0], output = device.outputs[0], r = rs[0],
                          reduction = onHost(reductions[0]), n, schedule = row.schedule](auto& c, auto& node) {
                           schedule(c, node, pieces(deviceBuffer(input, r.dtype), n), deviceBuffer(output, r.dtype),
                                    reduction.op, reduction.premultiply);
                         });
    }
    default: break;  // staged
  }
  return staged(call, outputs.front().device(), inputs, outputs, /*inPlace=*/false,
                [reductions = onHostAll(reductions), n](const auto& in, const auto& out) {
                  return host::reduceScatterTensor(in, out, reductions, n);
                });
}

CudaPath::Work CudaPath::alltoallSingle(const at::Tensor& input, const at::Tensor& output,
                                        const std::vector<int64_t>& inRows, const std::vector<int64_t>& outRows,
                                        const Call& call) {
  const auto& row =
      chosen(call, CollectiveKind::Alltoall, transport::alltoallTable(), shapeOf(0, 0, oneDevice({input, output})));
  if (row.road == Road::Nccl) {
    // An output that shares memory with the input (in place) gets a copy: NCCL reads while it writes.
    const DeviceTensors device({input}, {output}, /*inPlace=*/false, /*separate=*/true);
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
    return onNccl(call, {input}, {output}, device,
                  [=, input = device.inputs[0], output = device.outputs[0]](cudaStream_t stream,
                                                                            nccl::Communicator& comm, const auto& d) {
                    comm.grouped(
                        [&] {
                          for (size_t p = 0; p < sendSizes.size(); ++p) {
                            if (sendSizes[p] > 0) {
                              comm.send(static_cast<const char*>(input.data_ptr()) + sendStarts[p], sendSizes[p],
                                        int(p), stream, d);
                            }
                            if (recvSizes[p] > 0) {
                              comm.recv(static_cast<char*>(output.data_ptr()) + recvStarts[p], recvSizes[p], int(p),
                                        stream, d);
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
  std::vector<at::Tensor> all = inputs;
  all.insert(all.end(), outputs.begin(), outputs.end());
  const auto& row = chosen(call, CollectiveKind::Alltoall, transport::alltoallTable(), shapeOf(0, 0, oneDevice(all)));
  if (row.road == Road::Nccl) {
    const DeviceTensors device(inputs, outputs, /*inPlace=*/false, /*separate=*/true);
    return onNccl(call, inputs, outputs, device,
                  [inputs = device.inputs, outputs = device.outputs](cudaStream_t stream, nccl::Communicator& comm,
                                                                     const auto& d) {
                    comm.grouped(
                        [&] {
                          for (size_t p = 0; p < inputs.size(); ++p) {
                            if (bytesOf(inputs[p]) > 0)
                              comm.send(inputs[p].data_ptr(), bytesOf(inputs[p]), int(p), stream, d);
                            if (bytesOf(outputs[p]) > 0)
                              comm.recv(outputs[p].data_ptr(), bytesOf(outputs[p]), int(p), stream, d);
                          }
                        },
                        d);
                  });
  }
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
    return onNccl(onCurrent, {token}, {token}, DeviceTensors({token}, {token}, /*inPlace=*/true),
                  [token](cudaStream_t stream, nccl::Communicator& comm, const auto& d) {
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
