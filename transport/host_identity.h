// Which host a process runs on, as the transport decides "same host": the hostname and the kernel's
// boot id (two processes share memory only within one boot of one kernel; simulated hosts in their own
// UTS namespaces have their own hostnames). HIER_HOST_ID overrides it, for tests.
#pragma once

#include <string>

namespace hier::transport {

std::string hostIdentity();

}  // namespace hier::transport
