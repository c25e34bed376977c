#include "transport/base/host_identity.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>

namespace hier::transport {

std::string hostIdentity() {
  if (const char* forced = std::getenv("HIER_HOST_ID"); forced != nullptr && *forced != '\0') return forced;
  return machineIdentity();
}

std::string machineIdentity() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return std::string(name) + "/" + boot;
}

}  // namespace hier::transport
