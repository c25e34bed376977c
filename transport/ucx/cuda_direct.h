// Whether the network step of a hierarchical schedule on CUDA tensors hands UCX the device buffer itself
// ("direct") or a pinned host copy of it ("staged", nccl/device_node_steps.h). Direct saves two copies
// over PCIe where the network reaches device memory (GPUDirect RDMA); over TCP, UCX stages CUDA memory
// through host buffers of its own, which hier's pipelined staging does as well or better. A pure choice,
// tested on the CPU; only steps that move bytes go direct (a reduction's step reduces on the host).
#pragma once

#include <string>
#include <vector>

namespace hier::transport::ucx {

enum class CudaDirectMode { Auto, Off, On };

// HIER_CUDA_DIRECT: unset or "auto", "0", "1". Anything else throws, naming the variable and its values.
CudaDirectMode parseCudaDirect(const char* value);

struct CudaDirectChoice {
  bool direct = false;
  std::string why;  // for the log and torch_hier.info()
};

// `ucxTakesCuda`: the UCX context lists CUDA memory (ucp_context_query); `betweenHosts`: the transports
// its endpoints to other hosts use so far ("rc_mlx5/mlx5_0:1", "tcp/eth0"; empty before the first
// connection, or under UCX before 1.14); `gpuDirectRdma`: the host's RDMA devices can reach GPU memory.
// On: direct wherever UCX takes CUDA memory. Auto: direct only where every transport between hosts is
// RDMA and GPUDirect RDMA is there. Off, or UCX without CUDA memory: staged.
CudaDirectChoice chooseCudaDirect(CudaDirectMode mode, bool ucxTakesCuda, const std::vector<std::string>& betweenHosts,
                                  bool gpuDirectRdma);

// The choice for this process's next cross-host operation: HIER_CUDA_DIRECT (read once), what its UCX
// engine takes and has connected over so far (transportsSeen), and this host's sysfs (read once). Logs
// the choice at INFO the first time and whenever it changes (the first connection to another host).
CudaDirectChoice cudaDirectForThisProcess();

}  // namespace hier::transport::ucx
