// Which host a process runs on, as the transport decides "same host": the hostname and the kernel's
// boot id (two processes share memory only within one boot of one kernel; simulated hosts in their own
// UTS namespaces have their own hostnames). HIER_HOST_ID overrides it, for tests.
#pragma once

#include <string>

namespace hier::transport {

std::string hostIdentity();

// The same without HIER_HOST_ID: the machine UCX sees, which decides what UCX can reach a peer by.
std::string machineIdentity();

}  // namespace hier::transport
