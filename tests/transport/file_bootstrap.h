// A Bootstrap over files in a directory all ranks share: what the transport tests use in place of the
// c10d Store, so they need neither torch nor a server.
#pragma once

#include <memory>
#include <string>

#include "transport/base/bootstrap.h"

namespace hier::testing {

class FileBootstrap : public transport::Bootstrap {
 public:
  explicit FileBootstrap(std::string directory, std::string prefix = "")
      : directory_(std::move(directory)), prefix_(std::move(prefix)) {}
  // The same directory with keys under `prefix`, as c10d's PrefixStore gives each group its own keys.
  std::shared_ptr<FileBootstrap> withPrefix(const std::string& prefix) const {
    return std::make_shared<FileBootstrap>(directory_, prefix_ + prefix);
  }

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;

 private:
  std::string path(const std::string& key) const;
  std::string directory_;
  std::string prefix_;
};

}  // namespace hier::testing
