#include "plugin/host_bodies.hpp"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/sparse_coo_tensor.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cstring>
#include <span>

#include "plugin/tensors.hpp"
#include "transport/agreement/carried_results.h"
#include "transport/message_algorithms/split_sizes.h"
#include "transport/reduce/reduce.h"
#include "transport/select/dispatch.h"

namespace hier::host {
namespace {

using transport::Buffer;
using transport::DataType;

std::vector<Buffer> bytesOfEach(const std::vector<at::Tensor>& tensors) {
  std::vector<Buffer> views;
  views.reserve(tensors.size());
  for (auto& t : tensors) views.push_back(byteView(t));
  return views;
}

// `whole` cut into `parts` equal consecutive pieces, as byte views.
std::vector<Buffer> bytePieces(const at::Tensor& whole, int parts) {
  const size_t piece = size_t(whole.numel()) * whole.element_size() / size_t(parts);
  std::vector<Buffer> views;
  for (int p = 0; p < parts; ++p) views.push_back(byteView(whole, size_t(p) * piece, piece));
  return views;
}

std::vector<Buffer> typedPieces(const at::Tensor& whole, int parts, DataType dtype) {
  const size_t piece = size_t(whole.numel()) / size_t(parts);
  std::vector<Buffer> views;
  for (int p = 0; p < parts; ++p) views.push_back(typedView(whole, dtype).slice(size_t(p) * piece, piece));
  return views;
}

// What a reduce-scatter reads: contiguous, premultiplied when PREMUL_SUM asks (never the caller's own
// tensor then).
at::Tensor reductionInput(const at::Tensor& input, const Reduction& reduction) {
  at::Tensor in = input.contiguous();
  if (!reduction.premultiply) return in;
  at::Tensor scaled = at::empty_like(in);
  reduction.premultiplyInto(scaled, in);
  return scaled;
}

std::vector<at::Tensor> contiguousTargets(const std::vector<Staged>& staged) {
  std::vector<at::Tensor> targets;
  for (auto& s : staged) targets.push_back(s.contiguous());
  return targets;
}

// ---- small collectives, finished from the pieces the agreement carried (carried_results.h) --------

using transport::carried::Bytes;
using transport::carried::Pieces;

size_t bytesIn(const at::Tensor& t) { return size_t(t.numel()) * t.element_size(); }
Bytes bytesOf(const at::Tensor& t) { return {static_cast<const std::byte*>(t.data_ptr()), bytesIn(t)}; }

using transport::carried::bytesOf;
using transport::carried::copyEach;
using transport::carried::copyInto;
using transport::carried::misfit;
using transport::carried::partOf;
using transport::carried::partTableBytes;
using transport::carried::reduceCarried;
using transport::carried::reduceCarriedAtRoot;
using transport::carried::withPartTable;

}  // namespace

void Reduction::premultiplyInto(const at::Tensor& into, const at::Tensor& from) const {
  if (premultiply) transport::scale(into.data_ptr(), from.data_ptr(), size_t(from.numel()), dtype, *premultiply);
}

Body allreduce(const at::Tensor& tensor, const Reduction& reduction) {
  Staged staged(tensor, /*copyIn=*/true);
  return [staged, reduction](Running& running) {
    const at::Tensor& data = staged.contiguous();
    const Buffer view = typedView(data, reduction.dtype);
    if (view.bytes() <= running.carryLimit()) {
      // PREMUL_SUM's factor goes on a copy: the caller's tensor stays as it was until the ranks agreed.
      at::Tensor piece = data;
      if (reduction.premultiply) {
        piece = at::empty_like(data);
        reduction.premultiplyInto(piece, data);
      }
      if (const transport::Carried* all = running.carry({bytesOf(piece)})) {
        reduceCarried(*all, 0, view, reduction.op);
        staged.finish();
        return;
      }
    }
    reduction.premultiplyInto(data, data);
    auto c = running.next();
    transport::allreduce(c, view, reduction.op);
    staged.finish();
  };
}

Body allreduceSparse(const at::Tensor& tensor) {
  return [tensor](Running& running) {
    const at::Tensor input = tensor.coalesce();
    const at::Tensor indices = input._indices().contiguous();  // [sparse dims, nnz], int64
    const at::Tensor values = input._values().contiguous();    // [nnz, dense sizes...]
    auto counting = running.next();
    const int size = counting.size();
    int64_t nnz = input._nnz();
    std::vector<int64_t> counts(size_t(size), 0);
    std::vector<Buffer> countViews;
    for (auto& count : counts) countViews.push_back(Buffer{&count, 1, DataType::Int64, transport::MemoryType::Host});
    transport::allgather(counting, Buffer{&nnz, 1, DataType::Int64, transport::MemoryType::Host}, countViews);
    const int64_t most = *std::max_element(counts.begin(), counts.end());

    // Every rank's part padded to the largest count, so that one allgather of equal pieces moves each.
    auto gather = [&](const at::Tensor& mine, int64_t dim) {
      std::vector<int64_t> padded = mine.sizes().vec();
      padded[size_t(dim)] = most;
      at::Tensor piece = at::zeros(padded, mine.options());
      piece.narrow(dim, 0, mine.size(dim)).copy_(mine);
      padded.insert(padded.begin(), size);
      at::Tensor all = at::empty(padded, mine.options());
      std::vector<Buffer> parts;
      for (int r = 0; r < size; ++r) parts.push_back(byteView(all.select(0, r)));
      auto c = running.next();
      transport::allgather(c, byteView(piece), parts);
      return all;
    };
    const at::Tensor allIndices = gather(indices, 1);
    const at::Tensor allValues = gather(values, 0);
    std::vector<at::Tensor> indexParts, valueParts;
    for (int r = 0; r < size; ++r) {
      indexParts.push_back(allIndices.select(0, r).narrow(1, 0, counts[size_t(r)]));
      valueParts.push_back(allValues.select(0, r).narrow(0, 0, counts[size_t(r)]));
    }
    // Coalescing adds up the entries that several ranks hold.
    const at::Tensor sum =
        at::sparse_coo_tensor(at::cat(indexParts, 1), at::cat(valueParts, 0), input.sizes(), input.options())
            .coalesce();
    tensor.copy_(sum);
  };
}

Body allreduceCoalesced(const std::vector<at::Tensor>& tensors, const std::vector<Reduction>& reductions) {
  // One flat buffer per dtype, in order of first appearance: one transport allreduce each.
  std::vector<std::vector<size_t>> groups;
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return tensors[g[0]].scalar_type() == tensors[i].scalar_type(); });
    if (it == groups.end())
      groups.push_back({i});
    else
      it->push_back(i);
  }
  std::vector<at::Tensor> flats;
  for (auto& group : groups) {
    std::vector<at::Tensor> pieces;
    for (size_t i : group) pieces.push_back(tensors[i].reshape({-1}));
    flats.push_back(at::cat(pieces));
  }
  return [tensors, groups, flats, reductions](Running& running) {
    for (size_t g = 0; g < groups.size(); ++g) {
      const Reduction& reduction = reductions[groups[g][0]];
      reduction.premultiplyInto(flats[g], flats[g]);
      auto c = running.next();
      transport::allreduce(c, typedView(flats[g], reduction.dtype), reduction.op);
      int64_t offset = 0;
      for (size_t i : groups[g]) {
        const int64_t n = tensors[i].numel();
        tensors[i].copy_(flats[g].narrow(0, offset, n).view(tensors[i].sizes()));
        offset += n;
      }
    }
  };
}

Body broadcast(const at::Tensor& tensor, int root, bool isRoot) {
  Staged staged(tensor, /*copyIn=*/isRoot);
  return [staged, root, isRoot](Running& running) {
    const at::Tensor& data = staged.contiguous();
    // Only the root carries: the pieces come to its data.
    if (const transport::Carried* all = running.carry(isRoot ? Pieces{bytesOf(data)} : Pieces{}, bytesIn(data))) {
      if (!isRoot) copyInto(all->piece(root), byteView(data));
      staged.finish();
      return;
    }
    auto c = running.next();
    transport::broadcast(c, byteView(data), root);
    staged.finish();
  };
}

Body reduce(const at::Tensor& tensor, const Reduction& reduction, int root, bool isRoot) {
  // Every rank reads its tensor (a premultiplied copy for PREMUL_SUM); only the root's changes.
  at::Tensor input = reductionInput(tensor, reduction);
  Staged staged(tensor, /*copyIn=*/false);
  return [staged, input, reduction, root, isRoot](Running& running) {
    Buffer in = typedView(input, reduction.dtype);
    // The others carry their inputs to the root, which reduces them onto its own and carries nothing.
    const size_t total = size_t(running.size() - 1) * bytesIn(input);
    if (const transport::Carried* all = running.carry(isRoot ? Pieces{} : Pieces{bytesOf(input)}, total)) {
      if (isRoot) {
        reduceCarriedAtRoot(*all, root, in, typedView(staged.contiguous(), reduction.dtype), reduction.op);
        staged.finish();
      }
      return;
    }
    auto c = running.next();
    transport::reduce(c, in, isRoot ? typedView(staged.contiguous(), reduction.dtype) : in, reduction.op, root);
    if (isRoot) staged.finish();
  };
}

Body allgather(const at::Tensor& input, const std::vector<at::Tensor>& outputs) {
  std::vector<Staged> staged;
  for (auto& out : outputs) staged.emplace_back(out, /*copyIn=*/false);
  at::Tensor in = input.contiguous();
  return [staged, in](Running& running) {
    const std::vector<Buffer> outs = bytesOfEach(contiguousTargets(staged));
    if (const transport::Carried* all = running.carry({bytesOf(in)})) {
      copyEach(*all, outs);
      for (auto& s : staged) s.finish();
      return;
    }
    auto c = running.next();
    transport::allgather(c, byteView(in), outs);
    for (auto& s : staged) s.finish();
  };
}

Body allgatherIntoTensor(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs, int parts) {
  std::vector<Staged> staged;
  std::vector<at::Tensor> ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    staged.emplace_back(outputs[i], /*copyIn=*/false);
    ins.push_back(inputs[i].contiguous());
  }
  return [staged, ins, parts](Running& running) {
    if (ins.size() == 1) {
      if (const transport::Carried* all = running.carry({bytesOf(ins[0])})) {
        copyEach(*all, bytePieces(staged[0].contiguous(), parts));
        staged[0].finish();
        return;
      }
    }
    for (size_t i = 0; i < ins.size(); ++i) {
      auto c = running.next();
      transport::allgather(c, byteView(ins[i]), bytePieces(staged[i].contiguous(), parts));
      staged[i].finish();
    }
  };
}

Body allgatherCoalesced(const std::vector<at::Tensor>& inputs, const std::vector<std::vector<at::Tensor>>& outputs) {
  // Each part starts 16-byte aligned in the packed buffer, so that it is read back as a typed tensor of any
  // dtype (complex128's elements are 16 bytes). Every rank lays its parts out alike: the agreement checks
  // that every part has the same size and dtype on every rank.
  std::vector<int64_t> offsets;
  int64_t packedBytes = 0;
  for (const auto& in : inputs) {
    offsets.push_back(packedBytes);
    packedBytes += (int64_t(bytesIn(in)) + 15) / 16 * 16;
  }
  const int parts = int(outputs.size());
  at::Tensor packed = at::empty({packedBytes}, at::kByte);
  at::Tensor gathered = at::empty({packedBytes * parts}, at::kByte);
  auto partAt = [](const at::Tensor& buffer, int64_t offset, const at::Tensor& like) {
    return at::from_blob(static_cast<uint8_t*>(buffer.data_ptr()) + offset, like.sizes(), like.options());
  };
  for (size_t i = 0; i < inputs.size(); ++i) partAt(packed, offsets[i], inputs[i]).copy_(inputs[i]);
  Body gather = allgatherIntoTensor({packed}, {gathered}, parts);
  return [gather, gathered, outputs, offsets, packedBytes, partAt](Running& running) {
    gather(running);
    for (size_t r = 0; r < outputs.size(); ++r) {
      for (size_t i = 0; i < outputs[r].size(); ++i) {
        at::Tensor out = outputs[r][i];
        out.copy_(partAt(gathered, int64_t(r) * packedBytes + offsets[i], out));
      }
    }
  };
}

Body gather(const at::Tensor& input, const std::vector<at::Tensor>& outputs, int root) {
  std::vector<Staged> staged;
  for (auto& out : outputs) staged.emplace_back(out, /*copyIn=*/false);
  at::Tensor in = input.contiguous();
  return [staged, in, root](Running& running) {
    const std::vector<Buffer> outs = bytesOfEach(contiguousTargets(staged));  // the root's only
    // The others carry their parts to the root, which copies its own and carries nothing.
    const bool isRoot = running.rank() == root;
    const size_t total = size_t(running.size() - 1) * bytesIn(in);
    if (const transport::Carried* all = running.carry(isRoot ? Pieces{} : Pieces{bytesOf(in)}, total)) {
      for (size_t r = 0; r < outs.size(); ++r) copyInto(int(r) == root ? bytesOf(in) : all->piece(int(r)), outs[r]);
      for (auto& s : staged) s.finish();
      return;
    }
    auto c = running.next();
    transport::gather(c, byteView(in), outs, root);
    for (auto& s : staged) s.finish();
  };
}

Body scatter(const std::vector<at::Tensor>& inputs, const at::Tensor& output, int root) {
  std::vector<at::Tensor> ins;
  for (auto& in : inputs) ins.push_back(in.contiguous());
  Staged staged(output, /*copyIn=*/false);
  return [staged, ins, root](Running& running) {
    const Buffer out = byteView(staged.contiguous());
    // The root carries every other rank's part (ins, only the root has them; its own part stays empty
    // there), the others nothing.
    const bool isRoot = running.rank() == root;
    std::vector<uint64_t> table;
    Pieces mine;
    if (!ins.empty()) {
      Pieces each;
      for (const auto& in : ins) each.push_back(bytesOf(in));
      if (isRoot && size_t(root) < each.size()) each[size_t(root)] = {};
      mine = withPartTable(each, table);
    }
    // Only the root carries: the others' parts, each as large as this rank's output.
    const size_t total = partTableBytes(size_t(running.size())) + size_t(running.size() - 1) * out.bytes();
    if (const transport::Carried* all = running.carry(mine, total)) {
      const size_t n = size_t(running.size());
      copyInto(isRoot ? bytesOf(ins[size_t(root)]) : partOf(all->piece(root), size_t(running.rank()), n), out);
      staged.finish();
      return;
    }
    auto c = running.next();
    transport::scatter(c, bytesOfEach(ins), out, root);
    staged.finish();
  };
}

Body reduceScatter(const std::vector<at::Tensor>& inputs, const at::Tensor& output, const Reduction& reduction) {
  std::vector<at::Tensor> ins;
  for (auto& in : inputs) ins.push_back(reductionInput(in, reduction));
  Staged staged(output, /*copyIn=*/false);
  return [staged, ins, reduction](Running& running) {
    std::vector<Buffer> views;
    Pieces mine;
    size_t mineAt = 0;  // where this rank's part starts in every rank's piece, in elements
    for (size_t r = 0; r < ins.size(); ++r) {
      views.push_back(typedView(ins[r], reduction.dtype));
      mine.push_back(bytesOf(ins[r]));
      if (int(r) < running.rank()) mineAt += views.back().count;
    }
    if (const transport::Carried* all = running.carry(mine)) {
      reduceCarried(*all, mineAt, typedView(staged.contiguous(), reduction.dtype), reduction.op);
      staged.finish();
      return;
    }
    auto c = running.next();
    transport::reduceScatter(c, views, typedView(staged.contiguous(), reduction.dtype), reduction.op);
    staged.finish();
  };
}

Body reduceScatterTensor(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                         const std::vector<Reduction>& reductions, int parts) {
  std::vector<Staged> staged;
  std::vector<at::Tensor> ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ins.push_back(reductionInput(inputs[i], reductions[i]));
    staged.emplace_back(outputs[i], /*copyIn=*/false);
  }
  return [staged, ins, reductions, parts](Running& running) {
    if (ins.size() == 1) {
      if (const transport::Carried* all = running.carry({bytesOf(ins[0])})) {
        const Buffer out = typedView(staged[0].contiguous(), reductions[0].dtype);
        reduceCarried(*all, size_t(running.rank()) * out.count, out, reductions[0].op);
        staged[0].finish();
        return;
      }
    }
    for (size_t i = 0; i < ins.size(); ++i) {
      auto c = running.next();
      transport::reduceScatter(c, typedPieces(ins[i], parts, reductions[i].dtype),
                               typedView(staged[i].contiguous(), reductions[i].dtype), reductions[i].op);
      staged[i].finish();
    }
  };
}

namespace {

// An all-to-all, its split sizes checked in the agreement: every rank carries its split sizes (what it
// sends to and expects from each rank), and all its parts too when they fit, so that every rank checks
// every pair's sizes alike (and all raise the same error on a mismatch). When every rank carried its
// parts, each takes its own part of each piece and nothing more moves; else the transport's all-to-all
// moves the data, given the sizes, which it then does not share again (one round fewer). When not even
// the sizes fit (or the call takes no agreement), the transport shares and checks them itself.
void alltoallAgreed(Running& running, const std::vector<Buffer>& sends, const std::vector<Buffer>& receives) {
  const size_t n = sends.size(), splitBytes = 2 * n * sizeof(uint64_t);
  std::vector<uint64_t> splits;  // sent to each rank, then expected from each
  for (const auto& send : sends) splits.push_back(send.bytes());
  for (const auto& receive : receives) splits.push_back(receive.bytes());
  Pieces parts{bytesOf(splits)};
  size_t whole = partTableBytes(n + 1) + splitBytes;
  for (const auto& send : sends) {
    parts.push_back(Bytes(static_cast<const std::byte*>(send.data), send.bytes()));
    whole += send.bytes();
  }
  // The sizes alone when the parts do not fit. A piece's length tells which it is: one with every part
  // is longer than partTableBytes(1) + splitBytes, since its table alone has n + 2 entries.
  if (whole > running.carryLimit()) parts.resize(1);
  std::vector<uint64_t> table;
  const transport::Carried* all = running.carry(withPartTable(parts, table));
  if (all == nullptr) {
    auto c = running.next();
    return transport::alltoall(c, sends, receives);
  }
  std::vector<uint64_t> sizes(2 * n * n);
  bool everyPart = true;
  for (size_t r = 0; r < n; ++r) {
    const Bytes piece = all->piece(int(r));
    const bool sizesOnly = piece.size() == partTableBytes(1) + splitBytes;
    everyPart = everyPart && !sizesOnly;
    const Bytes theirs = partOf(piece, 0, sizesOnly ? 1 : n + 1);
    if (theirs.size() != splitBytes) misfit("carried split sizes", theirs.size(), splitBytes);
    std::memcpy(&sizes[2 * n * r], theirs.data(), theirs.size());
  }
  transport::algorithms::checkSplitSizes(sizes, int(n));
  if (!everyPart) {
    auto c = running.next();
    return transport::alltoall(c, sends, receives, &sizes);
  }
  for (size_t r = 0; r < n; ++r) copyInto(partOf(all->piece(int(r)), size_t(running.rank()) + 1, n + 1), receives[r]);
}

}  // namespace

Body alltoallSingle(const at::Tensor& input, const at::Tensor& output, const std::vector<int64_t>& inRows,
                    const std::vector<int64_t>& outRows) {
  const size_t inRowBytes = input.size(0) ? size_t(input.numel() / input.size(0)) * input.element_size() : 0;
  const size_t outRowBytes = output.size(0) ? size_t(output.numel() / output.size(0)) * output.element_size() : 0;
  // Reading and writing the same memory at once would scramble it: read from a copy then.
  at::Tensor in = input.contiguous();
  if (in.storage().is_alias_of(output.storage())) in = in.clone();
  Staged staged(output, /*copyIn=*/false);
  return [staged, in, inRows, outRows, inRowBytes, outRowBytes](Running& running) {
    std::vector<Buffer> sends, receives;
    size_t inOffset = 0, outOffset = 0;
    for (size_t p = 0; p < inRows.size(); ++p) {
      sends.push_back(byteView(in, inOffset, size_t(inRows[p]) * inRowBytes));
      receives.push_back(byteView(staged.contiguous(), outOffset, size_t(outRows[p]) * outRowBytes));
      inOffset += size_t(inRows[p]) * inRowBytes;
      outOffset += size_t(outRows[p]) * outRowBytes;
    }
    alltoallAgreed(running, sends, receives);
    staged.finish();
  };
}

Body alltoall(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) {
  std::vector<at::Tensor> ins;
  std::vector<Staged> staged;
  for (size_t p = 0; p < inputs.size(); ++p) {
    ins.push_back(inputs[p].contiguous());
    staged.emplace_back(outputs[p], /*copyIn=*/false);
  }
  // An output that shares memory with an input would be overwritten while being sent: send copies.
  for (auto& in : ins) {
    for (auto& out : outputs) {
      if (in.storage().is_alias_of(out.storage())) in = in.clone();
    }
  }
  return [staged, ins](Running& running) {
    const std::vector<Buffer> sends = bytesOfEach(ins), receives = bytesOfEach(contiguousTargets(staged));
    alltoallAgreed(running, sends, receives);
    for (auto& s : staged) s.finish();
  };
}

Body barrier() {
  // The agreement is a dissemination exchange, itself a barrier: no rank leaves it before every rank
  // entered it. It is all a barrier needs; a call that takes no agreement runs the barrier on its own.
  return [](Running& running) {
    if (running.takesAgreement()) return running.agree(std::nullopt);
    auto c = running.next();
    transport::barrier(c);
  };
}

}  // namespace hier::host
