// How long a waiting thread spins before it sleeps, learned from what waking a sleeper costs here.
//
// Spinning costs a core; sleeping costs the wake-up, which on a VM is a host's business and can take
// tens of microseconds where bare metal takes a few (docs/measurements.md). A wait that spins for as
// long as a wake-up costs pays at most twice what the best choice would (the ski-rental argument); one
// that gives up much sooner pays the wake-up on most waits that outlast its spin. Worse, two ranks then
// take turns: each one's wake-up makes the other wait past its spin, so it sleeps too, and every
// collective pays a wake-up.
//
// So the spin is twice the wake-up time recently measured (a waker stamps its post, the woken thread
// reads the stamp, less the time it then waited for a CPU), between 50 us and 1 ms, for every wait in the
// process. The shared-memory waits measure it, and learn only where every rank of their arena has a CPU
// of its own. HIER_SPIN_US fixes the spin instead.
#pragma once

#include <chrono>

namespace hier::transport {

// The spin a wait should take now, and the least it takes (HIER_SPIN_US where set).
std::chrono::microseconds spinBudget();
std::chrono::microseconds leastSpin();
// A thread that slept was woken `latency` after the post that woke it.
void noteWakeUp(std::chrono::nanoseconds latency);
// How long the calling thread has waited, in all, for a CPU while runnable (/proc/thread-self/schedstat),
// or -1 where the kernel does not say. A wait that slept takes this out of its wake-up: where the ranks
// share CPUs with other work (data loaders, a build) the woken rank waits for a CPU too, which a longer
// spin would only lengthen.
std::chrono::nanoseconds runnableWaitSoFar();
// The recent wake-up time the spin follows (for diagnostics: torch_hier.info()).
std::chrono::nanoseconds wakeUpEstimate();

// The bounds of the learned spin.
inline constexpr std::chrono::microseconds kLeastSpin{50};
inline constexpr std::chrono::microseconds kMostSpin{1000};

}  // namespace hier::transport
