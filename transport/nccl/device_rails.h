// The rails allgather and reduce-scatter of device buffers on a group that spans hosts with the same
// number of ranks on each: the schedules of hierarchy/allgather_rails.cpp and reduce_scatter_rails.cpp,
// with the same fragments and pipeline (hierarchy/pipeline.h), NCCL doing the node steps and UCX the
// rail steps through two pinned host slots (device_staging.h).
//
//   allgatherRails      per fragment: this rank's piece to the host; the rail gathers the pieces of its
//                       members across the nodes; they go to their places in the output; every node
//                       broadcasts them among its ranks (one NCCL group of broadcasts).
//   reduceScatterRails  per fragment: every node reduces, for each node n, the pieces meant for node n's
//                       ranks, each to the rank on that rank's rail (one NCCL group of reduces, into
//                       device scratch); those node sums go to the host; the rail reduce-scatters them
//                       across the nodes; the result goes to the output.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <optional>
#include <vector>

#include "transport/algorithms/algorithms.h"
#include "transport/collective.h"
#include "transport/hierarchy/topology.h"
#include "transport/nccl/nccl_communicator.h"
#include "transport/types.h"

namespace hier::transport::nccl {

// Every rank's `count` elements into `output`, rank after rank. Any element type: pass bytes as UInt8.
struct DeviceAllgather {
  const void* input;
  void* output;
  size_t count;
  DataType dtype;
};
size_t allgatherRailsPinnedBytes(const DeviceAllgather& allgather, const hierarchy::Topology& topology);
void allgatherRails(Collective& c, Communicator& node, const DeviceAllgather& allgather, cudaStream_t stream,
                    void* pinned);

// `input` holds one part of `count` elements per rank, rank after rank; rank r's `output` receives the
// reduction of every rank's part r. AVG and PREMUL_SUM as in DeviceAllreduce.
struct DeviceReduceScatter {
  const void* input;
  void* output;
  size_t count;
  DataType dtype;
  ReduceOp op;
  std::optional<double> premultiply;
};
size_t reduceScatterRailsPinnedBytes(const DeviceReduceScatter& reduceScatter, const hierarchy::Topology& topology);
size_t reduceScatterRailsDeviceBytes(const DeviceReduceScatter& reduceScatter, const hierarchy::Topology& topology);
void reduceScatterRails(Collective& c, Communicator& node, const DeviceReduceScatter& reduceScatter,
                        cudaStream_t stream, void* pinned, void* deviceScratch);

// The fragments both cut each rank's part into (as the host schedules do), and the largest of them in
// bytes: the stride of their pinned and device slots.
std::vector<algorithms::Range> railFragments(size_t count, DataType dtype, int worldSize);
size_t railPieceBytes(size_t count, DataType dtype, int worldSize);

}  // namespace hier::transport::nccl
