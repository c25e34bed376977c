// Runs a test body in several real processes, one per rank, sharing a FileBootstrap directory.
//
// Each rank is a fork()ed child that makes its own UCX engine. A child reports failure by throwing
// (CHECK below) or by any other exception; the parent waits for all children up to a limit, kills
// stragglers, and fails the gtest with every child's message.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include "tests/transport/file_bootstrap.h"

namespace hier::testing {

struct RankContext {
  int rank;
  int size;
  std::shared_ptr<FileBootstrap> bootstrap;
};

// Runs `body` on `size` ranks. Returns the messages of the ranks that failed ("" when all passed).
// `expectExit` lists ranks allowed to exit abruptly (tests of peer failure).
std::string runRanks(int size, const std::function<void(const RankContext&)>& body,
                     std::chrono::seconds limit = std::chrono::seconds(60), std::vector<int> expectExit = {});

#define HIER_CHECK(condition, message)                                                           \
  do {                                                                                           \
    if (!(condition)) {                                                                          \
      std::ostringstream hier_check_stream;                                                      \
      hier_check_stream << __FILE__ << ":" << __LINE__ << ": " << #condition << ": " << message; \
      throw std::runtime_error(hier_check_stream.str());                                         \
    }                                                                                            \
  } while (0)

}  // namespace hier::testing
