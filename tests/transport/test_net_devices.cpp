// The choice of a network device per local rank (transport/ucx/net_devices.h), on sysfs trees modelled
// on real hosts (tests/transport/sysfs/), and the engine that applies it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "transport/base/error.h"
#include "transport/ucx/engine.h"
#include "transport/ucx/net_devices.h"

namespace hier::transport::ucx {
namespace {

namespace fs = std::filesystem;

// Lays out a recorded tree ("file PATH CONTENT" / "link PATH TARGET" lines) in a fresh directory.
class SysfsTree {
 public:
  explicit SysfsTree(const std::string& name)
      : root_(fs::temp_directory_path() / ("hier-sysfs-" + name + "-" + std::to_string(getpid()))) {
    fs::remove_all(root_);
    std::ifstream in(fs::path(HIER_TEST_SYSFS) / (name + ".txt"));
    EXPECT_TRUE(in.good()) << "no recorded tree " << name;
    fs::create_directories(root_ / "devices");
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream fields(line);
      std::string kind, path, rest;
      fields >> kind >> path;
      std::getline(fields >> std::ws, rest);
      fs::create_directories((root_ / path).parent_path());
      if (kind == "file") {
        std::ofstream(root_ / path) << rest << "\n";
      } else if (kind == "link") {
        fs::create_directory_symlink(rest, root_ / path);
      } else {
        ADD_FAILURE() << "not an entry of a recorded tree: " << line;
      }
    }
  }
  ~SysfsTree() { fs::remove_all(root_); }
  std::string path() const { return root_.string(); }

 private:
  fs::path root_;
};

std::string busIdOf(const std::string& pciPath) { return pciPath.substr(pciPath.rfind('/') + 1); }

std::string chosen(const HostDevices& host, int localRank, const std::string& gpu = "",
                   const std::string& override = "") {
  auto choice = chooseNetDevices(host, localRank, gpu, override);
  return choice ? choice->devices : "(UCX's own)";
}

TEST(NetDevices, ReadsADgxLikeHost) {
  SysfsTree tree("dgx_8gpu_8nic");
  const HostDevices host = readHostDevices(tree.path());
  EXPECT_TRUE(host.hasRdmaDevices);
  EXPECT_TRUE(host.gpuDirectRdma);  // module/nvidia_peermem
  ASSERT_EQ(host.rdma.size(), 8u);
  EXPECT_EQ(host.rdma[0].name, "mlx5_0:1");
  EXPECT_EQ(host.gpus.size(), 8u);
  // The management NIC is the one socket device: the InfiniBand ports' own interfaces and lo are not.
  ASSERT_EQ(host.sockets.size(), 1u);
  EXPECT_EQ(host.sockets[0].name, "eno1");
}

TEST(NetDevices, EachGpuTakesTheNicBesideItUnderItsSwitch) {
  SysfsTree tree("dgx_8gpu_8nic");
  const HostDevices host = readHostDevices(tree.path());
  ASSERT_EQ(host.gpus.size(), 8u);
  // The tree puts mlx5_<beside[i]> under the switch of the i-th GPU in bus order: not local rank order,
  // so a choice by local rank alone gets 6 of 8 wrong.
  const int beside[] = {3, 1, 0, 2, 7, 5, 4, 6};
  for (int i = 0; i < 8; ++i) {
    std::string bus = busIdOf(host.gpus[size_t(i)]);
    for (auto& c : bus) c = char(std::toupper(static_cast<unsigned char>(c)));  // as CUDA writes it
    // The local rank does not matter where the GPU is known.
    EXPECT_EQ(chosen(host, 7 - i, bus), "mlx5_" + std::to_string(beside[i]) + ":1") << "GPU " << bus;
  }
  // Without a GPU to go by: local rank mod the ports.
  EXPECT_EQ(chosen(host, 9), "mlx5_1:1");
  EXPECT_EQ(chosen(host, -1), "(UCX's own)");
}

TEST(NetDevices, TwoSocketNicsAlternateByLocalRank) {
  SysfsTree tree("two_nic");
  const HostDevices host = readHostDevices(tree.path());
  EXPECT_FALSE(host.hasRdmaDevices);
  EXPECT_TRUE(host.gpus.empty());
  // docker0, the bridge, its port and the interface that is down are left out.
  ASSERT_EQ(host.sockets.size(), 2u);
  EXPECT_EQ(chosen(host, 0), "ens1f0");
  EXPECT_EQ(chosen(host, 1), "ens2f0");
  EXPECT_EQ(chosen(host, 2), "ens1f0");
  EXPECT_EQ(chosen(host, 3), "ens2f0");
  // A GPU bus id that is not on this host changes nothing.
  EXPECT_EQ(chosen(host, 1, "0000:99:00.0"), "ens2f0");
}

TEST(NetDevices, OneNicLeavesUcxItsOwnChoice) {
  SysfsTree tree("one_nic");
  const HostDevices host = readHostDevices(tree.path());
  EXPECT_TRUE(host.hasRdmaDevices);  // present, but its only port is down
  EXPECT_TRUE(host.rdma.empty());
  ASSERT_EQ(host.sockets.size(), 1u);
  EXPECT_EQ(host.sockets[0].name, "eth0");
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(chosen(host, rank), "(UCX's own)");
}

TEST(NetDevices, HierNetDevicesOverridesTheChoice) {
  SysfsTree tree("two_nic");
  const HostDevices host = readHostDevices(tree.path());
  EXPECT_EQ(chosen(host, 1, "", "all"), "(UCX's own)");
  EXPECT_EQ(chosen(host, 1, "", "mlx5_2:1"), "mlx5_2:1");  // one name: every local rank
  EXPECT_EQ(chosen(host, 0, "", "eth0,eth1,eth2"), "eth0");
  EXPECT_EQ(chosen(host, 2, "", "eth0,eth1,eth2"), "eth2");
  EXPECT_EQ(chosen(host, 4, "", "eth0,eth1,eth2"), "eth1");
  EXPECT_THROW(chosen(host, -1, "", "eth0,eth1"), Error);  // a list, but no local rank to index it by
  EXPECT_THROW(chosen(host, 0, "", ","), Error);
}

TEST(NetDevices, PciDistanceCountsHopsThroughTheNearestBridge) {
  EXPECT_EQ(pciDistance("pci0000:15/a/b/gpu", "pci0000:15/a/c/nic"), 4);
  EXPECT_EQ(pciDistance("pci0000:15/a/gpu", "pci0000:15/a/nic"), 2);
  EXPECT_GT(pciDistance("pci0000:15/a/gpu", "pci0000:37/a/nic"), pciDistance("pci0000:15/x/y/z/gpu", "pci0000:15/nic"));
}

TEST(NetDevices, AHostWithRdmaDevicesReachedOverTcpWarnsNamingTheFix) {
  SysfsTree withRdma("one_nic"), without("two_nic");
  const bool rdma = readHostDevices(withRdma.path()).hasRdmaDevices;
  ASSERT_TRUE(rdma);
  EXPECT_FALSE(readHostDevices(withRdma.path()).gpuDirectRdma);  // no peer-memory client
  EXPECT_FALSE(readHostDevices(without.path()).gpuDirectRdma);
  const auto warning = rdmaUnusedWarning(rdma, {"tcp/eth0"});
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("over tcp/eth0"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("libucx-cu13 wheel"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("-Ducx=system"), std::string::npos) << *warning;
  // RDMA in use, a host without RDMA devices, or a UCX that cannot say: nothing to warn of.
  EXPECT_FALSE(rdmaUnusedWarning(rdma, {"rc_mlx5/mlx5_0:1", "tcp/eth0"}));
  EXPECT_FALSE(rdmaUnusedWarning(rdma, {"dc_mlx5/mlx5_0:1"}));
  EXPECT_FALSE(rdmaUnusedWarning(readHostDevices(without.path()).hasRdmaDevices, {"tcp/ens1f0"}));
  EXPECT_FALSE(rdmaUnusedWarning(rdma, {}));
}

// The engine applies the choice, and the user's UCX_NET_DEVICES wins over it.
TEST(NetDevices, TheEngineUsesTheChoiceUnlessUcxNetDevicesIsSet) {
  ::setenv("HIER_NET_DEVICES", "eth7,lo", 1);
  ::setenv("LOCAL_RANK", "1", 1);
  ::unsetenv("UCX_NET_DEVICES");
  {
    auto engine = Engine::acquire("net-devices-test-1");
    EXPECT_EQ(engine->netDevices().rfind("lo: HIER_NET_DEVICES", 0), 0u) << engine->netDevices();
  }
  ::setenv("UCX_NET_DEVICES", "lo", 1);
  {
    auto engine = Engine::acquire("net-devices-test-2");
    EXPECT_EQ(engine->netDevices(), "lo (UCX_NET_DEVICES)");
  }
  ::unsetenv("UCX_NET_DEVICES");
  ::unsetenv("HIER_NET_DEVICES");
  ::unsetenv("LOCAL_RANK");
}

}  // namespace
}  // namespace hier::transport::ucx
