// How a 64-bit UCX tag names a message: which communicator, which operation, who sent it.
//
//   63          44 43 42                 20 19          0
//   |  group id   |k |  sequence or p2p tag |  source rank |
//
// k is 0 for collectives (the slot is the communicator's collective sequence number, modulo 2^23) and
// 1 for point-to-point messages (the slot is the user's tag). Messages of one operation between the same
// two ranks share a tag; UCX matches them in the order they were sent. The group id's top two bits tell
// a group's sub-groups apart (its node, its rail, its leaders; see subGroupId). The point-to-point spaces
// of sub-group ids, where no user sends, carry a group's own messages: the node id's its failure notices
// and record exchange (group.cpp), the rail id's its windows' signals (window/window.cpp).
#pragma once

#include <cstdint>

namespace hier::transport {

inline constexpr int kTagRankBits = 20;
inline constexpr int kTagSlotBits = 23;
inline constexpr int kTagGroupBits = 20;
inline constexpr uint32_t kMaxRanks = 1u << kTagRankBits;
inline constexpr uint32_t kMaxGroupIds = 1u << kTagGroupBits;
// Ids the plugin hands out to groups; the rest of the id space is their sub-groups'.
inline constexpr uint32_t kMaxTopLevelGroupIds = kMaxGroupIds >> 2;
inline constexpr uint32_t kMaxUserTag = (1u << kTagSlotBits) - 1;

inline constexpr uint64_t makeTag(uint32_t group, bool pointToPoint, uint64_t slot, uint32_t sourceRank) {
  return (uint64_t(group & (kMaxGroupIds - 1)) << 44) | (uint64_t(pointToPoint) << 43) |
         ((slot & kMaxUserTag) << kTagRankBits) | uint64_t(sourceRank & (kMaxRanks - 1));
}

enum class SubCommunicator : uint32_t { Node = 1, Rail = 2, Leaders = 3 };
inline constexpr uint32_t subGroupId(uint32_t group, SubCommunicator kind) {
  return (group & (kMaxTopLevelGroupIds - 1)) | (uint32_t(kind) << (kTagGroupBits - 2));
}

inline constexpr uint64_t kMatchAll = ~uint64_t(0);
inline constexpr uint64_t kMatchAnySource = ~uint64_t(kMaxRanks - 1);

inline constexpr uint32_t sourceOf(uint64_t tag) { return uint32_t(tag & (kMaxRanks - 1)); }

}  // namespace hier::transport
