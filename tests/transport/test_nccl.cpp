// The NCCL half of the transport. Type and op mapping and the reading of NCCL's failures run everywhere;
// a machine without a GPU must refuse a communicator at once with CUDA's own reason; with a GPU, a
// one-rank communicator really reduces, and abort() from another thread frees it only once no call is
// using it.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <chrono>
#include <thread>
#include <vector>

#include "tests/transport/file_bootstrap.h"
#include "transport/base/error.h"
#include "transport/nccl/nccl_communicator.h"

namespace hier::transport::nccl {
namespace {

TEST(Nccl, TypesMapOntoNcclsOwn) {
  EXPECT_EQ(dataType(DataType::Float32), ncclFloat32);
  EXPECT_EQ(dataType(DataType::BFloat16), ncclBfloat16);
  EXPECT_EQ(dataType(DataType::Bool), ncclUint8);
  EXPECT_EQ(dataType(DataType::Int64), ncclInt64);
  EXPECT_FALSE(dataType(DataType::Complex64).has_value());  // complex travels as pairs of reals
  EXPECT_FALSE(dataType(DataType::Int16).has_value());
}

TEST(Nccl, ReductionsIncludingBoolAndTheRefusedOnes) {
  EXPECT_EQ(mapReduction(ReduceOp::Avg, DataType::Float32).op, ncclAvg);
  EXPECT_EQ(mapReduction(ReduceOp::Sum, DataType::Bool).op, ncclMax);      // logical or on 0/1
  EXPECT_EQ(mapReduction(ReduceOp::Product, DataType::Bool).op, ncclMin);  // logical and
  auto bitwise = mapReduction(ReduceOp::BXor, DataType::Int32);
  EXPECT_FALSE(bitwise.op.has_value());
  EXPECT_NE(bitwise.unsupported.find("no bitwise reductions"), std::string::npos) << bitwise.unsupported;
  EXPECT_FALSE(mapReduction(ReduceOp::BXor, DataType::Bool).op.has_value());
  EXPECT_FALSE(mapReduction(ReduceOp::Sum, DataType::Int16).op.has_value());  // no int16 in NCCL
  EXPECT_TRUE(scales(DataType::BFloat16));
  EXPECT_FALSE(scales(DataType::Int32));
}

TEST(Nccl, OneRankScalingIsTrustedFromTheReleaseThatFixedIt) {
  EXPECT_FALSE(scalesOnOneRank(22809));  // 2.28.9, torch 2.11's: drops the tail (NVIDIA/nccl#1950)
  EXPECT_FALSE(scalesOnOneRank(22906));
  EXPECT_TRUE(scalesOnOneRank(22907));
  EXPECT_TRUE(scalesOnOneRank(23001));
}

// What DeviceNodeSteps tells the schedules of a node of this many ranks (reduction_stages.h asks it of
// every node): scaling only for floating point, and on one rank only from 2.29.7.
TEST(Nccl, ACommunicatorScalesFloatingPointAndOnOneRankOnlyWhereNcclGetsItRight) {
  EXPECT_TRUE(scalesOn(DataType::Float32, 2, 22809));
  EXPECT_TRUE(scalesOn(DataType::BFloat16, 8, 22809));
  EXPECT_FALSE(scalesOn(DataType::Float32, 1, 22809));
  EXPECT_TRUE(scalesOn(DataType::Float32, 1, 22907));
  EXPECT_FALSE(scalesOn(DataType::Int32, 4, 22907));
}

TEST(Nccl, FailuresAreReadAsTheCallersMistakeAPeersOrInternal) {
  // Two ranks on one GPU: the caller's to fix, and the message says how (not a peer failure).
  auto duplicate =
      describeFailure(ncclInvalidUsage, "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000",
                      "ncclCommInitRankConfig");
  EXPECT_EQ(duplicate.kind(), ErrorKind::InvalidUsage);
  EXPECT_NE(std::string(duplicate.what()).find("NCCL_HOSTID"), std::string::npos) << duplicate.what();
  EXPECT_NE(std::string(duplicate.what()).find("set_device"), std::string::npos) << duplicate.what();
  EXPECT_EQ(describeFailure(ncclInvalidArgument, "", "ncclAllReduce").kind(), ErrorKind::InvalidUsage);
  EXPECT_EQ(describeFailure(ncclRemoteError, "socket closed", "NCCL").kind(), ErrorKind::PeerFailure);
  EXPECT_EQ(describeFailure(ncclSystemError, "", "NCCL").kind(), ErrorKind::PeerFailure);
  auto internal = describeFailure(ncclInternalError, "", "ncclGroupEnd");
  EXPECT_EQ(internal.kind(), ErrorKind::Internal);
  EXPECT_NE(std::string(internal.what()).find("ncclGroupEnd"), std::string::npos) << internal.what();
}

TEST(Nccl, VersionIsTheLinkedLibrarys) {
  int code = 0;
  ASSERT_EQ(ncclGetVersion(&code), ncclSuccess);
  EXPECT_EQ(version(),
            std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." + std::to_string(code % 100));
}

bool haveGpu(std::string& why) {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess)
    why = cudaGetErrorString(status);
  else if (count == 0)
    why = "no CUDA device";
  return status == cudaSuccess && count > 0;
}

TEST(Nccl, WithoutAGpuACommunicatorIsRefusedAtOnce) {
  std::string why;
  if (haveGpu(why)) GTEST_SKIP() << "this machine has a GPU; the refusal is for machines without one";
  char pattern[] = "/tmp/hier-nccl-test-XXXXXX";
  testing::FileBootstrap bootstrap(mkdtemp(pattern));
  auto start = std::chrono::steady_clock::now();
  try {
    Communicator comm(bootstrap, 0, 1, 0, Deadline::after(std::chrono::seconds(30)));
    FAIL() << "a NCCL communicator was made without a GPU";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::InvalidUsage);
    EXPECT_NE(std::string(error.what()).find("no usable CUDA device"), std::string::npos) << error.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// A ready NCCL communicator of one rank on GPU 0, for the tests that need a GPU.
struct OneRank {
  const Deadline deadline = Deadline::after(std::chrono::seconds(60));
  char pattern[32] = "/tmp/hier-nccl-test-XXXXXX";
  testing::FileBootstrap bootstrap{mkdtemp(pattern)};
  Communicator comm{bootstrap, 0, 1, 0, deadline};
  OneRank() { comm.awaitReady(deadline); }
};

#define HIER_NEEDS_GPU()                                                                                          \
  do {                                                                                                            \
    std::string why;                                                                                              \
    if (!haveGpu(why)) GTEST_SKIP() << "needs a CUDA GPU (" << why << "); run tests/gpu/run.sh on a GPU machine"; \
  } while (0)

TEST(Nccl, OneRankAllreduceAveragesAndScalesEveryElementOnTheGpu) {
  HIER_NEEDS_GPU();
  OneRank one;
  Communicator& comm = one.comm;
  const Deadline& deadline = one.deadline;
  // An odd count: NCCL's one-rank kernel before 2.29.7 leaves the tail of such a buffer unwritten.
  std::vector<float> host(70001, 3.0f);
  float* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, host.size() * sizeof(float)), cudaSuccess);
  cudaMemcpy(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  comm.allReduce(device, device, host.size(), DataType::Float32, Reduction{ReduceOp::Avg}, stream, deadline);
  float expected = 3.0f;
  if (comm.scales(DataType::Float32)) {
    comm.allReduce(device, device, host.size(), DataType::Float32, Reduction{ReduceOp::Sum, 0.5}, stream, deadline);
    expected = 1.5f;
  } else {
    // Refused rather than wrong; the plugin scales on the stream itself then.
    EXPECT_THROW(
        comm.allReduce(device, device, host.size(), DataType::Float32, Reduction{ReduceOp::Sum, 0.5}, stream, deadline),
        Error);
    EXPECT_TRUE(comm.aborted());
    cudaStreamSynchronize(stream);
    cudaMemcpy(host.data(), device, host.size() * sizeof(float), cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < host.size(); ++i) ASSERT_EQ(host[i], expected) << "element " << i;
    cudaFree(device);
    return;
  }
  cudaEvent_t done;
  cudaEventCreate(&done);
  cudaEventRecord(done, stream);
  comm.waitFor(done, deadline);
  cudaMemcpy(host.data(), device, host.size() * sizeof(float), cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < host.size(); ++i) ASSERT_EQ(host[i], expected) << "element " << i;
  comm.close(deadline);
  EXPECT_TRUE(comm.aborted());  // closed: no call is taken any more
  cudaFree(device);
}

TEST(Nccl, AbortFromAnotherThreadWaitsForTheCallInFlightAndLaterCallsFailAtOnce) {
  HIER_NEEDS_GPU();
  OneRank one;
  Communicator& comm = one.comm;
  const Deadline& deadline = one.deadline;
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  std::thread waiter([&] {
    // An event behind a host function that sleeps past the abort: waitFor polls it until then.
    cudaLaunchHostFunc(
        stream, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); }, nullptr);
    cudaEvent_t after;
    cudaEventCreate(&after);
    cudaEventRecord(after, stream);
    try {
      comm.waitFor(after, deadline);
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::Aborted) << error.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto start = std::chrono::steady_clock::now();
  comm.abort();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  waiter.join();
  float x = 0;
  try {
    comm.allReduce(&x, &x, 1, DataType::Float32, Reduction{}, stream, deadline);
    FAIL() << "an aborted communicator took a call";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Aborted) << error.what();
  }
  cudaStreamSynchronize(stream);
}

}  // namespace
}  // namespace hier::transport::nccl
