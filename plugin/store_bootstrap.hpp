// The transport's Bootstrap backed by a c10d Store (the group's prefixed store).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "transport/base/bootstrap.h"

namespace hier {

class StoreBootstrap : public transport::Bootstrap {
 public:
  explicit StoreBootstrap(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;

  c10d::Store& store() { return *store_; }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace hier
