// The differences between the torch releases hier builds against (2.11 to 2.15; pyproject.toml), one
// macro or alias per difference, each keyed on torch's own version macros. A binary is for the one torch
// minor release it was compiled against (the c10d vtables change between releases); the source is the
// same for all of them. Header-only, over torch's headers alone; in registry/, the lowest layer that sees
// torch, so that registry/ and plugin/ both include it downwards.
//
// The release each feature first appears in was read from the headers of every release in the range.
#pragma once

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

// True when the torch compiled against is MAJOR.MINOR or later.
#define HIER_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// "2.15": the release this binary is for; torch_hier.info() reports it.
#define HIER_TORCH_STRINGIFY_(x) #x
#define HIER_TORCH_STRINGIFY(x) HIER_TORCH_STRINGIFY_(x)
#define HIER_TORCH_BUILT_FOR HIER_TORCH_STRINGIFY(TORCH_VERSION_MAJOR) "." HIER_TORCH_STRINGIFY(TORCH_VERSION_MINOR)

// 2.14: the virtual c10d::Backend::Options::clone(), which hier's Options override so that a copy keeps
// its type. Before, there is nothing to override.
#define HIER_TORCH_HAS_OPTIONS_CLONE HIER_TORCH_AT_LEAST(2, 14)

// 2.14: OpType::ALLGATHER_INTO_TENSOR_COALESCED and REDUCE_SCATTER_TENSOR_COALESCED. Before, ProcessGroupNCCL
// tags these collectives OpType::COALESCED, and so does hier.
#define HIER_TORCH_HAS_TENSOR_COALESCED_OPTYPES HIER_TORCH_AT_LEAST(2, 14)

// 2.13: the PREMUL_SUM factor's type is c10d::PreMulSumSupplement (NCCLPreMulSumSupplement stays as an
// alias); before, it is NCCLPreMulSumSupplement only.
#define HIER_TORCH_HAS_PREMUL_SUM_SUPPLEMENT HIER_TORCH_AT_LEAST(2, 13)

// 2.15: c10d::is_process_group_registered(name). Before, the only question the GroupRegistry answers is
// resolve_process_group(name), which throws for a name it does not hold (or holds a dead group under).
#define HIER_TORCH_HAS_IS_PROCESS_GROUP_REGISTERED HIER_TORCH_AT_LEAST(2, 15)

// 2.15: the virtual c10d::Backend::gather_single (dist.gather_single), one flat output on the root.
// Before, dist.gather_single does not exist.
#define HIER_TORCH_HAS_GATHER_SINGLE HIER_TORCH_AT_LEAST(2, 15)

// c10d::Backend::addEphemeralTimeout (torch's _add_ephemeral_timeout) and the abort hooks
// (supportsAbortHooks, registerAbortHook, unregisterAbortHook): in 2.15, not in 2.11. The releases between
// were not read, so hier overrides them from 2.15 on; before, torch's defaults stand (no extension, no hooks).
#define HIER_TORCH_HAS_EPHEMERAL_TIMEOUT HIER_TORCH_AT_LEAST(2, 15)
#define HIER_TORCH_HAS_ABORT_HOOKS HIER_TORCH_AT_LEAST(2, 15)

// 2.14: the fault-tolerance membership change, c10d::Backend::supportsReconfigure, get_reconfigure_handle and
// reconfigure (ReconfigureOptions), with Backend's rank_ and size_ no longer const. Before, none of it.
#define HIER_TORCH_HAS_RECONFIGURE HIER_TORCH_AT_LEAST(2, 14)

// 2.14: one-sided windows (c10d::Window, Backend::supportsWindow and new_window; Put/Signal/WaitSignalOptions).
// Before, none of it.
#define HIER_TORCH_HAS_WINDOW HIER_TORCH_AT_LEAST(2, 14)

// 2.15: keyed completion hooks (c10d::Backend::supportsCompletionHooks, registerCompletionHook,
// unregisterCompletionHook; c10d::CompletionHookArgs) and Work::getCompletionKey. Before, none of it.
#define HIER_TORCH_HAS_COMPLETION_HOOKS HIER_TORCH_AT_LEAST(2, 15)

namespace hier::torch_compat {

#if HIER_TORCH_HAS_PREMUL_SUM_SUPPLEMENT
using PreMulSumSupplement = c10d::PreMulSumSupplement;
#else
using PreMulSumSupplement = c10d::NCCLPreMulSumSupplement;
#endif

#if HIER_TORCH_HAS_TENSOR_COALESCED_OPTYPES
inline constexpr c10d::OpType kAllgatherIntoTensorCoalesced = c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED;
inline constexpr c10d::OpType kReduceScatterTensorCoalesced = c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED;
#else
inline constexpr c10d::OpType kAllgatherIntoTensorCoalesced = c10d::OpType::COALESCED;
inline constexpr c10d::OpType kReduceScatterTensorCoalesced = c10d::OpType::COALESCED;
#endif

}  // namespace hier::torch_compat
