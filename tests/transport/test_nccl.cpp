// The NCCL half of the transport. Type and op mapping run everywhere; a machine without a GPU must refuse
// a communicator at once with CUDA's own reason; with GPUs, a one-rank communicator really reduces.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <chrono>
#include <vector>

#include "tests/transport/file_bootstrap.h"
#include "transport/error.h"
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
  EXPECT_EQ(reduction(ReduceOp::Avg, DataType::Float32).op, ncclAvg);
  EXPECT_EQ(reduction(ReduceOp::Sum, DataType::Bool).op, ncclMax);      // logical or on 0/1
  EXPECT_EQ(reduction(ReduceOp::Product, DataType::Bool).op, ncclMin);  // logical and
  auto bitwise = reduction(ReduceOp::BXor, DataType::Int32);
  EXPECT_FALSE(bitwise.op.has_value());
  EXPECT_NE(bitwise.unsupported.find("no bitwise reductions"), std::string::npos) << bitwise.unsupported;
  EXPECT_FALSE(reduction(ReduceOp::BXor, DataType::Bool).op.has_value());
}

TEST(Nccl, VersionIsTheLinkedLibrarys) {
  int code = 0;
  ASSERT_EQ(ncclGetVersion(&code), ncclSuccess);
  EXPECT_EQ(version(), std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
                           std::to_string(code % 100));
}

bool haveGpu(std::string& why) {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) why = cudaGetErrorString(status);
  else if (count == 0) why = "no CUDA device";
  return status == cudaSuccess && count > 0;
}

TEST(Nccl, WithoutAGpuACommunicatorIsRefusedAtOnce) {
  std::string why;
  if (haveGpu(why)) GTEST_SKIP() << "this machine has a GPU; the refusal is for machines without one";
  char pattern[] = "/tmp/hier-nccl-test-XXXXXX";
  testing::FileBootstrap bootstrap(mkdtemp(pattern));
  auto start = std::chrono::steady_clock::now();
  try {
    Communicator comm(bootstrap, 0, 1, 0, {std::chrono::steady_clock::now() + std::chrono::seconds(30),
                                           std::chrono::milliseconds(30000)});
    FAIL() << "a NCCL communicator was made without a GPU";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::InvalidUsage);
    EXPECT_NE(std::string(error.what()).find("no usable CUDA device"), std::string::npos) << error.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(Nccl, OneRankAllreduceAveragesOnTheGpu) {
  std::string why;
  if (!haveGpu(why)) GTEST_SKIP() << "needs a CUDA GPU (" << why << "); run tests/gpu/run.sh on a GPU machine";
  char pattern[] = "/tmp/hier-nccl-test-XXXXXX";
  testing::FileBootstrap bootstrap(mkdtemp(pattern));
  Communicator comm(bootstrap, 0, 1, 0, {std::chrono::steady_clock::now() + std::chrono::seconds(60),
                                         std::chrono::milliseconds(60000)});
  std::vector<float> host(1000, 3.0f);
  float* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, host.size() * sizeof(float)), cudaSuccess);
  cudaMemcpy(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  comm.allreduce(device, device, host.size(), DataType::Float32, ReduceOp::Avg, stream);
  comm.allreduce(device, device, host.size(), DataType::Float32, ReduceOp::Sum, stream, 0.5);
  cudaEvent_t done;
  cudaEventCreate(&done);
  cudaEventRecord(done, stream);
  comm.waitFor(done, {std::chrono::steady_clock::now() + std::chrono::seconds(30), std::chrono::milliseconds(30000)});
  cudaMemcpy(host.data(), device, host.size() * sizeof(float), cudaMemcpyDeviceToHost);
  for (float v : host) ASSERT_EQ(v, 1.5f);
  cudaFree(device);
}

}  // namespace
}  // namespace hier::transport::nccl
