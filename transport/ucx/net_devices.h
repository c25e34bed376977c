// Which network device a rank's UCX uses between hosts: one of its own per local rank ("rail"), the one
// nearest its GPU in the PCI tree where it has one, as NCCL binds a NIC to each GPU. Left to UCX, every
// rank of a host spreads over every device, and the rails of a split-rail schedule share them.
// The choice is a pure function of what sysfs shows, so that recorded trees test it.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace hier::transport::ucx {

struct NetDevice {
  std::string name;     // as UCX_NET_DEVICES names it: "mlx5_0:1" for an RDMA port, "eth0" for a socket device
  std::string pciPath;  // its place in the PCI tree, "pci0000:00/0000:00:01.0/0000:01:00.0"; empty if virtual
};

struct HostDevices {
  std::vector<NetDevice> rdma;     // active RDMA ports, in name order
  std::vector<NetDevice> sockets;  // interfaces up, not loopback, bridges or the RDMA ports' own, in name order
  std::vector<std::string> gpus;   // the NVIDIA GPUs' PCI paths, in bus order
  bool hasRdmaDevices = false;     // /sys/class/infiniband lists a device, active or not
  bool gpuDirectRdma = false;      // the RDMA devices can reach GPU memory: nvidia-peermem is loaded
};

// What `sysRoot` (normally "/sys") shows: class/infiniband, class/net, bus/pci/devices, and
// kernel/mm/memory_peers/nv_mem or module/nvidia_peermem (where NCCL looks for GPUDirect RDMA too).
HostDevices readHostDevices(const std::string& sysRoot);

struct NetChoice {
  std::string devices;  // for UCX_NET_DEVICES
  std::string why;      // for the log and torch_hier.info()
};

// The devices local rank `localRank` (-1: not known) uses. `gpuBusId` is its GPU's PCI bus id
// ("0000:1b:00.0", any case; empty if none); `override` is HIER_NET_DEVICES: empty for the choice below,
// "all" for UCX's own, one name for every local rank, or a comma-separated list, item i for local rank i
// (modulo its length). Without an override: RDMA ports where the host has any, else socket devices; the
// one nearest the GPU, else local rank mod their number. Nothing (UCX's own choice) where there is at
// most one device, or neither a GPU nor a local rank to choose by.
std::optional<NetChoice> chooseNetDevices(const HostDevices& host, int localRank, const std::string& gpuBusId,
                                          const std::string& override);

// Hops between two PCI paths through their nearest common bridge; paths under different roots are
// farther apart than any two under one.
int pciDistance(const std::string& a, const std::string& b);

// An RDMA transport of UCX's, by the name ucp_ep_query gives it ("rc_mlx5/mlx5_0:1": yes, "tcp/eth0": no).
bool isRdmaTransport(const std::string& transport);

// The warning for a host that has RDMA devices but whose UCX reaches another host without them
// (`transports`: an endpoint's, as "tcp/eth0"): the libucx-cu13 wheel, hier's default, has no
// InfiniBand or RoCE transport. It names the cause and the fix; nothing where all is well.
std::optional<std::string> rdmaUnusedWarning(bool hostHasRdmaDevices, const std::vector<std::string>& transports);

// The process's GPU, for the choice above: the CUDA side says it before the first engine is made
// (bus id as chooseNetDevices takes it).
void setGpuBusId(std::string busId);
std::string gpuBusId();

// The local rank the launcher gave this process (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID,
// in that order), or -1.
int launcherLocalRank();

}  // namespace hier::transport::ucx
