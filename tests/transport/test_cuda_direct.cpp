// The choice between handing UCX a CUDA tensor's device memory and staging it through pinned host
// memory for the network step (transport/ucx/cuda_direct.h): what each mode does with each UCX and host.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "transport/base/error.h"
#include "transport/ucx/cuda_direct.h"
#include "transport/ucx/net_devices.h"

namespace hier::transport::ucx {
namespace {

const std::vector<std::string> rdma{"rc_mlx5/mlx5_0:1"};
const std::vector<std::string> tcp{"tcp/eth0"};
const std::vector<std::string> mixed{"rc_mlx5/mlx5_0:1", "tcp/eth0"};
const std::vector<std::string> none{};

bool direct(CudaDirectMode mode, bool ucxTakesCuda, const std::vector<std::string>& betweenHosts, bool gdr) {
  return chooseCudaDirect(mode, ucxTakesCuda, betweenHosts, gdr).direct;
}

TEST(CudaDirect, ParsesHierCudaDirect) {
  EXPECT_EQ(parseCudaDirect(nullptr), CudaDirectMode::Auto);
  EXPECT_EQ(parseCudaDirect(""), CudaDirectMode::Auto);
  EXPECT_EQ(parseCudaDirect("auto"), CudaDirectMode::Auto);
  EXPECT_EQ(parseCudaDirect("0"), CudaDirectMode::Off);
  EXPECT_EQ(parseCudaDirect("1"), CudaDirectMode::On);
  try {
    parseCudaDirect("yes");
    FAIL() << "HIER_CUDA_DIRECT=yes was taken";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidUsage);
    EXPECT_NE(std::string(e.what()).find("HIER_CUDA_DIRECT=yes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("auto, 0"), std::string::npos) << e.what();
  }
}

TEST(CudaDirect, AutoGoesDirectOnlyOverRdmaThatReachesGpuMemory) {
  EXPECT_TRUE(direct(CudaDirectMode::Auto, true, rdma, true));
  EXPECT_TRUE(direct(CudaDirectMode::Auto, true, {"dc_mlx5/mlx5_0:1", "ud_verbs/mlx5_0:1"}, true));
  // TCP (UCX copies device memory through the host there), RDMA without a peer-memory client, a mix of
  // both, no connection yet, a UCX without CUDA memory: staged.
  EXPECT_FALSE(direct(CudaDirectMode::Auto, true, tcp, true));
  EXPECT_FALSE(direct(CudaDirectMode::Auto, true, rdma, false));
  EXPECT_FALSE(direct(CudaDirectMode::Auto, true, mixed, true));
  EXPECT_FALSE(direct(CudaDirectMode::Auto, true, none, true));
  EXPECT_FALSE(direct(CudaDirectMode::Auto, false, rdma, true));
}

TEST(CudaDirect, OnAndOffAreObeyedWhereUcxCanDoThem) {
  EXPECT_TRUE(direct(CudaDirectMode::On, true, tcp, false));
  EXPECT_TRUE(direct(CudaDirectMode::On, true, none, false));
  EXPECT_FALSE(direct(CudaDirectMode::On, false, rdma, true));  // this UCX takes host memory only
  EXPECT_FALSE(direct(CudaDirectMode::Off, true, rdma, true));
}

TEST(CudaDirect, TheReasonNamesWhatDecided) {
  auto why = [](CudaDirectMode mode, bool cuda, const std::vector<std::string>& hosts, bool gdr) {
    return chooseCudaDirect(mode, cuda, hosts, gdr).why;
  };
  EXPECT_NE(why(CudaDirectMode::Auto, true, tcp, true).find("over tcp/eth0"), std::string::npos);
  EXPECT_NE(why(CudaDirectMode::Auto, true, rdma, false).find("nvidia-peermem"), std::string::npos);
  EXPECT_NE(why(CudaDirectMode::Auto, true, rdma, true).find("GPUDirect RDMA"), std::string::npos);
  EXPECT_NE(why(CudaDirectMode::On, false, rdma, true).find("HIER_CUDA_DIRECT=1 cannot apply"), std::string::npos);
  EXPECT_NE(why(CudaDirectMode::Off, true, rdma, true).find("HIER_CUDA_DIRECT=0"), std::string::npos);
  EXPECT_NE(why(CudaDirectMode::Auto, true, none, true).find("no connection"), std::string::npos);
}

TEST(CudaDirect, RdmaTransportsByName) {
  for (const char* t : {"rc_mlx5/mlx5_0:1", "rc_verbs/mlx5_0:1", "dc_mlx5/mlx5_2:1", "ud_mlx5/mlx5_0:1", "srd/efa0"})
    EXPECT_TRUE(isRdmaTransport(t)) << t;
  for (const char* t : {"tcp/eth0", "sysv/memory", "posix/memory", "cma/memory", "cuda_copy/cuda", ""})
    EXPECT_FALSE(isRdmaTransport(t)) << t;
}

}  // namespace
}  // namespace hier::transport::ucx
