#include "tests/transport/file_bootstrap.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <thread>

#include "transport/base/error.h"

namespace hier::testing {

std::string FileBootstrap::path(const std::string& key) const {
  std::string name = prefix_ + key;
  for (auto& c : name) {
    if (c == '/') c = '_';
  }
  return directory_ + "/" + name;
}

void FileBootstrap::set(const std::string& key, const std::vector<uint8_t>& value) {
  // Write then rename, so a reader never sees half a value.
  std::string target = path(key), temporary = target + ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(temporary, std::ios::binary);
    out.write(reinterpret_cast<const char*>(value.data()), std::streamsize(value.size()));
  }
  std::rename(temporary.c_str(), target.c_str());
}

std::vector<uint8_t> FileBootstrap::get(const std::string& key, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::ifstream in(path(key), std::ios::binary);
    if (in) return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
    if (std::chrono::steady_clock::now() >= deadline) {
      throw transport::Error(transport::ErrorKind::Timeout, "key '" + key + "' was never set");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

int64_t FileBootstrap::add(const std::string& key, int64_t delta) {
  int fd = open((path(key) + ".lock").c_str(), O_CREAT | O_RDWR, 0600);
  flock(fd, LOCK_EX);
  int64_t value = 0;
  {
    std::ifstream in(path(key));
    if (in) in >> value;
  }
  value += delta;
  std::string text = std::to_string(value);
  set(key, std::vector<uint8_t>(text.begin(), text.end()));
  flock(fd, LOCK_UN);
  close(fd);
  return value;
}

bool FileBootstrap::check(const std::vector<std::string>& keys) {
  for (auto& key : keys) {
    if (access(path(key).c_str(), F_OK) != 0) return false;
  }
  return true;
}

}  // namespace hier::testing
