#include "transport/base/helper_thread.h"

namespace hier::transport {
namespace {

thread_local bool helper = false;

}  // namespace

void markHelperThread() { helper = true; }

bool onHelperThread() { return helper; }

}  // namespace hier::transport
