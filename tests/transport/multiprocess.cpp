#include "tests/transport/multiprocess.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

namespace hier::testing {

std::string runRanks(int size, const std::function<void(const RankContext&)>& body, std::chrono::seconds limit,
                     std::vector<int> expectExit) {
  char pattern[] = "/tmp/hier-transport-test-XXXXXX";
  std::string directory = mkdtemp(pattern);
  std::fflush(nullptr);

  std::vector<pid_t> children;
  for (int rank = 0; rank < size; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      int code = 0;
      try {
        body({rank, size, std::make_shared<FileBootstrap>(directory)});
      } catch (const std::exception& error) {
        std::ofstream(directory + "/failure." + std::to_string(rank)) << error.what();
        code = 1;
      }
      std::fflush(nullptr);
      _exit(code);  // no gtest teardown, no static destructors of the parent's state
    }
    children.push_back(pid);
  }

  std::string failures;
  auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<bool> finished(size_t(size), false);
  int remaining = size;
  while (remaining > 0) {
    for (int rank = 0; rank < size; ++rank) {
      if (finished[size_t(rank)]) continue;
      int status = 0;
      if (waitpid(children[size_t(rank)], &status, WNOHANG) != children[size_t(rank)]) continue;
      finished[size_t(rank)] = true;
      --remaining;
      bool expected = std::find(expectExit.begin(), expectExit.end(), rank) != expectExit.end();
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
      if (expected) continue;
      std::ifstream in(directory + "/failure." + std::to_string(rank));
      std::string message(std::istreambuf_iterator<char>(in), {});
      if (message.empty())
        message = WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                      : "exit code " + std::to_string(WEXITSTATUS(status));
      failures += "rank " + std::to_string(rank) + ": " + message + "\n";
    }
    if (remaining > 0 && std::chrono::steady_clock::now() > deadline) {
      for (int rank = 0; rank < size; ++rank) {
        if (!finished[size_t(rank)]) {
          kill(children[size_t(rank)], SIGKILL);
          waitpid(children[size_t(rank)], nullptr, 0);
          failures += "rank " + std::to_string(rank) + ": still running after " + std::to_string(limit.count()) +
                      " s, killed\n";
        }
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::filesystem::remove_all(directory);
  return failures;
}

}  // namespace hier::testing
