#include "transport/ucx/cuda_direct.h"

#include <cstdlib>
#include <mutex>
#include <string_view>

#include "transport/base/error.h"
#include "transport/base/log.h"
#include "transport/ucx/engine.h"
#include "transport/ucx/net_devices.h"

namespace hier::transport::ucx {
namespace {

std::string joined(const std::vector<std::string>& items) {
  std::string all;
  for (const auto& item : items) all += (all.empty() ? "" : ", ") + item;
  return all;
}

}  // namespace

CudaDirectMode parseCudaDirect(const char* value) {
  const std::string_view v = value == nullptr ? "" : value;
  if (v.empty() || v == "auto") return CudaDirectMode::Auto;
  if (v == "0") return CudaDirectMode::Off;
  if (v == "1") return CudaDirectMode::On;
  throw Error(ErrorKind::InvalidUsage, "HIER_CUDA_DIRECT=" + std::string(v) +
                                           " is not one of auto, 0 (stage device buffers through "
                                           "pinned host memory) or 1 (hand them to UCX); unset it for auto");
}

CudaDirectChoice chooseCudaDirect(CudaDirectMode mode, bool ucxTakesCuda, const std::vector<std::string>& betweenHosts,
                                  bool gpuDirectRdma) {
  if (mode == CudaDirectMode::Off) return {false, "staged through pinned host memory: HIER_CUDA_DIRECT=0"};
  if (!ucxTakesCuda) {
    return {false, std::string("staged through pinned host memory: this UCX takes host memory only") +
                       (mode == CudaDirectMode::On ? " (HIER_CUDA_DIRECT=1 cannot apply)" : "")};
  }
  if (mode == CudaDirectMode::On) {
    return {true, "device buffers handed to UCX: HIER_CUDA_DIRECT=1" +
                      (betweenHosts.empty() ? std::string() : " (over " + joined(betweenHosts) + ")")};
  }
  if (betweenHosts.empty()) return {false, "staged through pinned host memory: no connection to another host yet"};
  for (const auto& t : betweenHosts) {
    if (!isRdmaTransport(t)) {
      return {false, "staged through pinned host memory: UCX reaches other hosts over " + t +
                         ", which copies device memory through the host anyway"};
    }
  }
  if (!gpuDirectRdma) {
    return {false,
            "staged through pinned host memory: the RDMA devices cannot reach GPU memory here "
            "(no nvidia-peermem); HIER_CUDA_DIRECT=1 hands UCX the device buffers anyway"};
  }
  return {true, "device buffers handed to UCX: " + joined(betweenHosts) + " with GPUDirect RDMA"};
}

CudaDirectChoice cudaDirectForThisProcess() {
  static const CudaDirectMode mode = parseCudaDirect(std::getenv("HIER_CUDA_DIRECT"));
  static const bool gpuDirectRdma = readHostDevices("/sys").gpuDirectRdma;
  const TransportsSeen seen = transportsSeen();
  if (!seen.takesCudaMemory && mode != CudaDirectMode::Off) {
    return {false, "staged through pinned host memory: no UCX engine yet to say what it takes"};
  }
  CudaDirectChoice choice =
      chooseCudaDirect(mode, seen.takesCudaMemory.value_or(false), seen.betweenHosts, gpuDirectRdma);
  static std::mutex mutex;
  static std::string logged;
  std::lock_guard<std::mutex> lock(mutex);
  if (choice.why != logged) {
    logged = choice.why;
    log(LogLevel::Info, "CUDA tensors between hosts: " + choice.why);
  }
  return choice;
}

}  // namespace hier::transport::ucx
