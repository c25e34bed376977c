// A bootstrap whose keys live under a prefix of another's: what c10d's PrefixStore is to a Store. Sub-
// communicators (a node's ranks, a rail) keep their keys apart this way.
#pragma once

#include <memory>
#include <string>

#include "transport/base/bootstrap.h"

namespace hier::transport {

class PrefixBootstrap : public Bootstrap {
 public:
  PrefixBootstrap(std::shared_ptr<Bootstrap> base, std::string prefix)
      : base_(std::move(base)), prefix_(std::move(prefix)) {}

  void set(const std::string& key, const std::vector<uint8_t>& value) override { base_->set(prefix_ + key, value); }
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override {
    return base_->get(prefix_ + key, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override { return base_->add(prefix_ + key, delta); }
  bool check(const std::vector<std::string>& keys) override {
    std::vector<std::string> prefixed;
    for (auto& key : keys) prefixed.push_back(prefix_ + key);
    return base_->check(prefixed);
  }

 private:
  std::shared_ptr<Bootstrap> base_;
  std::string prefix_;
};

}  // namespace hier::transport
