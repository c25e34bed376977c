// The threads hier starts for itself mark themselves: UCX's progress thread and a pipeline's network
// stage here, a group's executors and the CUDA watchdog's threads in the plugin. What such a thread lets
// go of can then tell that it is not on a caller's thread (plugin/held_tensors.hpp says why a caller's
// tensors must know).
#pragma once

namespace hier::transport {

void markHelperThread();
bool onHelperThread();

}  // namespace hier::transport
