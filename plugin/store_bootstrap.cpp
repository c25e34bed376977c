#include "plugin/store_bootstrap.hpp"

#include "transport/base/error.h"

namespace hier {

void StoreBootstrap::set(const std::string& key, const std::vector<uint8_t>& value) { store_->set(key, value); }

std::vector<uint8_t> StoreBootstrap::get(const std::string& key, std::chrono::milliseconds timeout) {
  try {
    store_->wait({key}, timeout);
  } catch (const c10::Error& error) {
    // TCPStore throws DistStoreError, FileStore a plain c10::Error ("Wait timeout").
    throw transport::Error(transport::ErrorKind::Timeout,
                           "store key '" + key + "' was not set in time (" + error.what_without_backtrace() + ")");
  }
  return store_->get(key);
}

int64_t StoreBootstrap::add(const std::string& key, int64_t delta) { return store_->add(key, delta); }

bool StoreBootstrap::check(const std::vector<std::string>& keys) { return store_->check(keys); }

}  // namespace hier
