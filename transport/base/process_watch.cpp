#include "transport/base/process_watch.h"

#include <errno.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace hier::transport {

ProcessIdentity thisProcess() {
  struct stat ns {};
  return {int64_t(getpid()), stat("/proc/self/ns/pid", &ns) == 0 ? uint64_t(ns.st_ino) : 0};
}

int watchProcess(const ProcessIdentity& peer) {
  const ProcessIdentity self = thisProcess();
  if (peer.pid <= 0 || peer.pid == self.pid || self.pidNamespace == 0 || peer.pidNamespace != self.pidNamespace) {
    return -1;
  }
  const int pidfd = int(syscall(SYS_pidfd_open, pid_t(peer.pid), 0));
  // The peer published this pid while it ran, in this pid namespace: no such process now means it ended.
  if (pidfd < 0 && errno == ESRCH) return kProcessGone;
  return pidfd;
}

bool processEnded(int pidfd) { return processEndsWithin(pidfd, 0); }

bool processEndsWithin(int pidfd, int ms) {
  if (pidfd == kProcessGone) return true;
  pollfd process{pidfd, POLLIN, 0};
  int ready;
  do {
    ready = pidfd >= 0 ? poll(&process, 1, ms) : 0;
  } while (ready < 0 && errno == EINTR);
  return ready == 1;
}

}  // namespace hier::transport
