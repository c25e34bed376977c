// Where the futures of CUDA operations complete. Completing a future runs its then() callbacks, which
// may take the GIL or wait for another future of the same group (DDP's PowerSGD hook does): so no
// completion may run on a thread another completion needs, nor on the watchdog's. One pool per process:
// an idle thread takes the next completion; when every thread is busy, one more starts; a thread idle
// for a while ends.
#pragma once

#include <functional>
#include <memory>

namespace hier {

class Completions {
 public:
  static Completions& process();
  // Runs `task` on a thread of the pool, soon, whatever the other tasks are doing. `task` must not throw.
  void run(std::function<void()> task);

 private:
  Completions();
  struct State;
  std::shared_ptr<State> state_;  // shared with the threads, which may outlive everything else at exit
};

}  // namespace hier
