// torch_hier._C: the Python binding of ProcessGroupHier, as a subclass of torch's c10d Backend so that
// torch.distributed can register it for a process group.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "plugin/groups.hpp"
#include "plugin/process_group_hier.hpp"
#include "registry/group_registry.hpp"
#include "registry/torch_version.hpp"
#include "transport/base/error.h"
#include "transport/base/settings.h"
#include "transport/base/spin_budget.h"
#include "transport/group/group.h"
#include "transport/reduce/reduce.h"
#include "transport/ucx/cuda_direct.h"
#include "transport/ucx/engine.h"

#ifdef HIER_WITH_CUDA
#include <nccl.h>
#endif

namespace py = pybind11;

namespace {

// Holds the backend for Python and lets go of the GIL while the backend is destroyed: its destructor
// joins threads that may themselves need the GIL (future callbacks written in Python).
template <typename T>
class GilFreeDestructionPtr {
 public:
  GilFreeDestructionPtr() = default;
  explicit GilFreeDestructionPtr(T* raw) : ptr_(c10::intrusive_ptr<T>::reclaim_copy(raw)) {}
  explicit GilFreeDestructionPtr(c10::intrusive_ptr<T> ptr) : ptr_(std::move(ptr)) {}
  GilFreeDestructionPtr(const GilFreeDestructionPtr&) = default;
  GilFreeDestructionPtr& operator=(const GilFreeDestructionPtr&) = default;
  ~GilFreeDestructionPtr() {
    if (ptr_ && PyGILState_Check()) {
      py::gil_scoped_release release;
      ptr_.reset();
    }
  }
  T* get() const noexcept { return ptr_.get(); }
  T& operator*() const noexcept { return *ptr_; }
  T* operator->() const noexcept { return ptr_.get(); }

 private:
  // Must be the only member: pybind11 hands this holder to torch's functions as an intrusive_ptr.
  c10::intrusive_ptr<T> ptr_;
};

}  // namespace

PYBIND11_DECLARE_HOLDER_TYPE(T, GilFreeDestructionPtr<T>, true)

namespace {

py::dict buildInfo() {
  py::dict info;
  info["ucx_version"] = hier::transport::Group::messagingVersion();
  info["reduce_kernels"] = hier::transport::reduceKernelFlavour();
  // What this process's UCX uses so far: the network devices it was given (one per local rank), and
  // the transports its connections took, to other hosts and inside this one.
  const auto seen = hier::transport::ucx::transportsSeen();
  info["ucx_net_devices"] = seen.netDevices;
  info["ucx_transports_between_hosts"] = seen.betweenHosts;
  info["ucx_transports_inside_host"] = seen.insideHost;
  // Whether the next cross-host CUDA operation hands UCX its device buffers, and why (ucx/cuda_direct.h).
  try {
    info["cuda_direct"] = hier::transport::ucx::cudaDirectForThisProcess().why;
  } catch (const hier::transport::Error& error) {
    info["cuda_direct"] = std::string(error.what());  // HIER_CUDA_DIRECT is not a value it takes
  }
  // The torch this binary was compiled against; it loads into that minor release only (its C++ ABI).
  info["built_for_torch"] = HIER_TORCH_BUILT_FOR;  // "2.15"
  info["built_against_torch"] = TORCH_VERSION;     // "2.15.0"
#ifdef HIER_WITH_CUDA
  int nccl = 0;
  ncclGetVersion(&nccl);
  info["cuda_path_compiled"] = true;
  info["nccl_version"] = nccl;
#else
  info["cuda_path_compiled"] = false;
#endif
  const auto& s = hier::transport::settings();
  // The spin a wait takes now: HIER_SPIN_US, or what the waits learned (spin_budget.h).
  info["spin_us"] = hier::transport::spinBudget().count();
  info["spin_learned"] = !s.spinFixed;
  info["wake_up_us"] = double(hier::transport::wakeUpEstimate().count()) / 1000;
  info["allreduce_ring_min_bytes"] = s.allreduceRingMinBytes;
  info["reduce_ring_min_bytes"] = s.reduceRingMinBytes;
  info["broadcast_chain_min_bytes"] = s.broadcastChainMinBytes;
  info["allgather_ring_min_bytes"] = s.allgatherRingMinBytes;
  info["pipeline_chunk_bytes"] = s.pipelineChunkBytes;
  return info;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "hier: a hierarchical torch.distributed backend (C++ core)";
  // torch's c10d types must be registered with pybind11 before we derive from them.
  py::module::import("torch.distributed");
  auto c10dModule = py::module::import("torch._C._distributed_c10d");

  using hier::ProcessGroupHier;
  auto cls =
      py::class_<ProcessGroupHier, c10d::Backend, GilFreeDestructionPtr<ProcessGroupHier>>(m, "ProcessGroupHier");

  py::class_<ProcessGroupHier::Options, c10d::Backend::Options, c10::intrusive_ptr<ProcessGroupHier::Options>>(
      cls, "Options", "Options for a hier group: pass as pg_options to init_process_group or new_group.")
      .def(py::init<std::chrono::milliseconds, bool>(), py::arg("timeout") = kBackendDefaultTimeout,
           py::arg("is_high_priority_stream") = false)
      .def_readwrite("is_high_priority_stream", &ProcessGroupHier::Options::is_high_priority_stream,
                     "The group's CUDA streams take the device's greatest priority.");

  cls.def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                      std::chrono::milliseconds timeout, const std::string& groupName,
                      const std::vector<uint64_t>& globalRanks, bool highPriorityStream) {
            auto options = c10::make_intrusive<ProcessGroupHier::Options>(timeout, highPriorityStream);
            options->group_name = groupName;
            options->global_ranks_in_group = globalRanks;
            return GilFreeDestructionPtr<ProcessGroupHier>(
                c10::make_intrusive<ProcessGroupHier>(store, rank, size, options));
          }),
          py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout") = kBackendDefaultTimeout,
          py::arg("group_name") = "", py::arg("global_ranks") = std::vector<uint64_t>{},
          py::arg("is_high_priority_stream") = false, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("group_id", &ProcessGroupHier::groupId, "The job-wide id that tags this group's messages.")
      .def_property_readonly("group_name", &ProcessGroupHier::groupName)
      .def(
          "perform_nocolor_split",
          [](ProcessGroupHier& self, const c10::Device& device) {
            if (device.is_cuda()) self.performNocolorSplit(device.index());
          },
          py::arg("device"), py::call_guard<py::gil_scoped_release>(),
          "torch calls it on the ranks left out of a new group split from a parent bound to a device: their "
          "part of ncclCommSplit of the parent's communicator there, where the parent has one.")
      .def("_start", &ProcessGroupHier::start, py::arg("parent"), py::call_guard<py::gil_scoped_release>(),
           "What the creator does once a group is made: take the ranks' records and host facts from `parent` "
           "(the default group, or None) where it issued a collective before; set up at once with "
           "HIER_EAGER_INIT=1.")
      .def(
          "_split_cuda_from",
          [](ProcessGroupHier& self, ProcessGroupHier& parent, int device) { self.splitCudaFrom(parent, device); },
          py::arg("parent"), py::arg("device"), py::call_guard<py::gil_scoped_release>(),
          "A new group's part of ncclCommSplit of `parent`'s communicator on cuda:`device` (the creator calls "
          "it when torch splits the group from a parent bound to that device).")
      .def(
          "work_table",
          [](const ProcessGroupHier& self, const std::string& format) {
            TORCH_CHECK(format == "text" || format == "json",
                        "hier: work_table(format=...) takes 'text' or 'json', not '", format, "'");
            return format == "json" ? self.workTable().json() : self.workTable().text();
          },
          py::arg("format") = "text",
          "The group's operations in flight, never waited for, and recently finished, as text or JSON.");

  // Named groups from C++ (plugin/groups.hpp), for Python programs and tests that want them.
  m.def(
      "create_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const std::string& name,
         std::chrono::milliseconds timeout, const std::vector<uint64_t>& globalRanks, const std::string& description) {
        hier::GroupOptions options;
        options.timeout = timeout;
        options.globalRanks = globalRanks;
        options.description = description;
        return hier::createGroup(store, rank, size, name, options);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("name"), py::arg("timeout") = kBackendDefaultTimeout,
      py::arg("global_ranks") = std::vector<uint64_t>{}, py::arg("description") = "",
      py::call_guard<py::gil_scoped_release>());
  m.def("resolve_group", &hier::resolveGroup, py::arg("name"), py::call_guard<py::gil_scoped_release>());
  m.def("destroy_group", &hier::destroyGroup, py::arg("name"), py::call_guard<py::gil_scoped_release>());
  m.def("group_names", &hier::registry::names);
  m.def("set_thread_isolation_mode", &hier::setThreadIsolationMode, py::arg("enable"),
        "Threads as ranks: each thread gets group names (hier's and c10d's) and a UCX engine of its own.");

  m.def("info", &buildInfo, "What this build of hier has and how it is tuned (HIER_* settings).");
  (void)c10dModule;
}
