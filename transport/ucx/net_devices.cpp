#include "transport/ucx/net_devices.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>

#include "transport/base/error.h"

namespace hier::transport::ucx {
namespace {

namespace fs = std::filesystem;

std::string firstLine(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return line;
}

std::vector<std::string> split(const std::string& text, char by) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(by, start), text.size());
    if (end > start) parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return text;
}

// Where `link` (a sysfs device link) leads, under <sysRoot>/devices: "pci0000:00/.../0000:01:00.0", or
// empty for a virtual device.
std::string pciPathOf(const fs::path& link, const fs::path& devices) {
  std::error_code error;
  const fs::path real = fs::canonical(link, error);
  if (error) return "";
  const std::string relative = real.lexically_relative(devices).generic_string();
  return relative.rfind("pci", 0) == 0 ? relative : "";
}

std::vector<fs::path> entries(const fs::path& folder) {
  std::vector<fs::path> found;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(folder, error)) found.push_back(entry.path());
  std::sort(found.begin(), found.end());
  return found;
}

std::string names(const std::vector<NetDevice>& devices) {
  std::string all;
  for (const auto& d : devices) all += (all.empty() ? "" : ", ") + d.name;
  return all;
}

std::mutex gpuMutex;
std::string processGpu;

}  // namespace

HostDevices readHostDevices(const std::string& sysRoot) {
  HostDevices host;
  std::error_code error;
  const fs::path root(sysRoot);
  const fs::path devices = fs::canonical(root / "devices", error);
  std::vector<std::string> rdmaNetdevs;
  for (const auto& dev : entries(root / "class" / "infiniband")) {
    host.hasRdmaDevices = true;
    const std::string pci = pciPathOf(dev / "device", devices);
    for (const auto& port : entries(dev / "ports")) {
      // "4: ACTIVE"; a port down carries nothing.
      if (firstLine(port / "state").find("ACTIVE") == std::string::npos) continue;
      host.rdma.push_back({dev.filename().string() + ":" + port.filename().string(), pci});
    }
    for (const auto& netdev : entries(dev / "device" / "net")) rdmaNetdevs.push_back(netdev.filename().string());
  }
  for (const auto& iface : entries(root / "class" / "net")) {
    const std::string name = iface.filename().string();
    // Loopback (type 772), bridges and their ports, and the RDMA ports' own interfaces are not devices to
    // reach other hosts by, nor is an interface that is down.
    if (firstLine(iface / "type") == "772" || fs::exists(iface / "bridge") || fs::exists(iface / "brport")) continue;
    if (name.rfind("docker", 0) == 0 || name.rfind("virbr", 0) == 0) continue;
    if (std::find(rdmaNetdevs.begin(), rdmaNetdevs.end(), name) != rdmaNetdevs.end()) continue;
    const std::string state = firstLine(iface / "operstate");
    if (state != "up" && state != "unknown") continue;
    host.sockets.push_back({name, pciPathOf(iface / "device", devices)});
  }
  for (const auto& dev : entries(root / "bus" / "pci" / "devices")) {
    // NVIDIA (0x10de), display or 3D controller (class 0x03xxxx).
    if (firstLine(dev / "vendor") != "0x10de" || firstLine(dev / "class").rfind("0x03", 0) != 0) continue;
    if (std::string pci = pciPathOf(dev, devices); !pci.empty()) host.gpus.push_back(pci);
  }
  // The peer-memory client of NVIDIA's driver: the older nv_peer_mem registers nv_mem, the newer
  // nvidia-peermem shows as a module. (DMA-BUF, the other road, is the driver's to say, not sysfs's.)
  host.gpuDirectRdma = host.hasRdmaDevices && (fs::exists(root / "kernel" / "mm" / "memory_peers" / "nv_mem") ||
                                               fs::exists(root / "module" / "nvidia_peermem"));
  return host;
}

int pciDistance(const std::string& a, const std::string& b) {
  const auto left = split(a, '/'), right = split(b, '/');
  size_t common = 0;
  while (common < left.size() && common < right.size() && left[common] == right[common]) ++common;
  const int hops = int(left.size() - common + right.size() - common);
  // Across root complexes traffic crosses the CPUs' interconnect: farther than anything under one root.
  return common == 0 ? hops + 1000 : hops;
}

std::optional<NetChoice> chooseNetDevices(const HostDevices& host, int localRank, const std::string& gpuBusId,
                                          const std::string& override) {
  if (override == "all") return std::nullopt;
  if (!override.empty()) {
    const auto items = split(override, ',');
    if (items.empty()) throw Error(ErrorKind::InvalidUsage, "HIER_NET_DEVICES='" + override + "' names no device");
    if (items.size() == 1) return NetChoice{items[0], "HIER_NET_DEVICES"};
    if (localRank < 0) {
      throw Error(ErrorKind::InvalidUsage,
                  "HIER_NET_DEVICES lists a device per local rank, but the launcher gave no local rank "
                  "(LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK or SLURM_LOCALID); set one name for all ranks");
    }
    return NetChoice{items[size_t(localRank) % items.size()],
                     "HIER_NET_DEVICES, its item for local rank " + std::to_string(localRank)};
  }
  const bool rdma = !host.rdma.empty();
  const auto& candidates = rdma ? host.rdma : host.sockets;
  if (candidates.size() <= 1) return std::nullopt;
  const std::string kind = std::string(rdma ? "RDMA ports" : "socket devices") + " (" + names(candidates) + ")";

  const std::string busId = lower(gpuBusId);
  const auto gpu = std::find_if(host.gpus.begin(), host.gpus.end(), [&](const std::string& path) {
    return !busId.empty() && path.size() >= busId.size() &&
           path.compare(path.size() - busId.size(), busId.size(), busId) == 0;
  });
  if (gpu != host.gpus.end()) {
    int nearest = std::numeric_limits<int>::max();
    std::vector<const NetDevice*> tied;
    for (const auto& d : candidates) {
      if (d.pciPath.empty()) continue;
      const int distance = pciDistance(*gpu, d.pciPath);
      if (distance < nearest) {
        tied.clear();
        nearest = distance;
      }
      if (distance == nearest) tied.push_back(&d);
    }
    if (!tied.empty()) {
      // GPUs that share their nearest devices spread over them in bus order.
      const size_t index = size_t(gpu - host.gpus.begin());
      return NetChoice{tied[index % tied.size()]->name,
                       "the nearest of " + kind + " to GPU " + busId + " in the PCI tree"};
    }
  }
  if (localRank < 0) return std::nullopt;
  return NetChoice{candidates[size_t(localRank) % candidates.size()].name,
                   "local rank " + std::to_string(localRank) + "'s of " + kind};
}

bool isRdmaTransport(const std::string& transport) {
  for (const char* rdma : {"rc_", "dc_", "ud_", "srd"}) {
    if (transport.rfind(rdma, 0) == 0) return true;
  }
  return false;
}

std::optional<std::string> rdmaUnusedWarning(bool hostHasRdmaDevices, const std::vector<std::string>& transports) {
  if (!hostHasRdmaDevices || transports.empty()) return std::nullopt;
  std::string used;
  for (const auto& t : transports) {
    if (isRdmaTransport(t)) return std::nullopt;
    used += (used.empty() ? "" : ", ") + t;
  }
  return "this host has RDMA devices (/sys/class/infiniband), but UCX reaches other hosts over " + used +
         ": the UCX hier was built with has no RDMA transport (the libucx-cu13 wheel, hier's default, has none). "
         "Build hier against the cluster's UCX (meson setup -Ducx=system, README), or set UCX_TLS if that UCX "
         "has them turned off";
}

void setGpuBusId(std::string busId) {
  std::lock_guard<std::mutex> lock(gpuMutex);
  processGpu = std::move(busId);
}

std::string gpuBusId() {
  std::lock_guard<std::mutex> lock(gpuMutex);
  return processGpu;
}

int launcherLocalRank() {
  for (const char* name : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') continue;
    char* end = nullptr;
    const long rank = std::strtol(value, &end, 10);
    if (*end == '\0' && rank >= 0) return int(rank);
  }
  return -1;
}

}  // namespace hier::transport::ucx
