// The torch headers nearly every file of the plugin includes, compiled once per build directory (Meson's
// cpp_pch): parsing them is most of the time a plugin file takes to compile (13.8 of 14.9 s for
// group_core.cpp on two cores). Meson passes this header to every source of libtorch_hier with -include;
// the files still include what they use, so they build without it too (-Db_pch=false). No include
// guard: GCC warns about `#pragma once` in the file it precompiles, and nothing includes this one.

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
