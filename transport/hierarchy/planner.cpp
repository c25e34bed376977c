#include "transport/hierarchy/planner.h"

#include "transport/settings.h"

namespace hier::transport::hierarchy {

bool layered(const Topology& t) { return settings().hierarchy && t.nodeCount() > 1 && t.nodeCount() < t.size(); }

const char* toString(Schedule schedule) {
  switch (schedule) {
    case Schedule::Flat: return "flat";
    case Schedule::SplitRail: return "split rail";
    case Schedule::Leaders: return "node leaders";
    case Schedule::Rails: return "rails";
  }
  return "unknown";
}

Schedule planAllreduce(const Topology& t, size_t bytes, size_t count) {
  if (!layered(t)) return Schedule::Flat;
  if (t.uniform() && bytes >= settings().splitRailMinBytes && count >= size_t(t.size())) return Schedule::SplitRail;
  return Schedule::Leaders;
}

Schedule planAllgather(const Topology& t) { return layered(t) && t.uniform() ? Schedule::Rails : Schedule::Flat; }

Schedule planRooted(const Topology& t) { return layered(t) && t.uniform() ? Schedule::Rails : Schedule::Flat; }

}  // namespace hier::transport::hierarchy
