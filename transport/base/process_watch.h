// Watching a peer's process on this machine: UCX does not tell the ranks of one machine that one of
// them died (transport/ucx/engine.cpp), and a rank that waits for a dead peer in shared memory would wait
// out its deadline, torch's 30 minutes by default. A pidfd of the peer's process polls readable once the
// process has ended (crashed, killed, or exited while others still wait for it), zombie or reaped.
#pragma once

#include <cstdint>

namespace hier::transport {

// A process as a peer on the same machine can watch it. A pid names the same process to a peer only in
// the same pid namespace (pidNamespace: the inode of /proc/self/ns/pid, 0 where unknown).
struct ProcessIdentity {
  int64_t pid = 0;
  uint64_t pidNamespace = 0;
};

ProcessIdentity thisProcess();

// What watchProcess returns for a peer whose process has ended and been reaped already: no pidfd can be
// had then, and none is needed.
constexpr int kProcessGone = -2;

// A pidfd of `peer`'s process (the caller closes it, when >= 0), where a pid means the same process there
// and here (the same pid namespace, known) and that process is not this one (ranks may be threads of one
// process); kProcessGone when no process has that pid any more; -1 elsewhere, or on a kernel without
// pidfd_open (before Linux 5.3). Open it as early as the peer's identity is known: a pid is reused once
// its process is gone, and a reused one would be watched in its place.
int watchProcess(const ProcessIdentity& peer);

// Whether the process behind `pidfd` (watchProcess) has ended: true for kProcessGone, false for -1.
bool processEnded(int pidfd);

// processEnded, waiting up to `ms` for it: a process being killed closes its files (its shared memory
// with them) before its pidfd turns readable, so a peer can see the memory fail a moment before the end.
bool processEndsWithin(int pidfd, int ms);

}  // namespace hier::transport
