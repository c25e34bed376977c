#include "transport/group/collective.h"

#include <algorithm>
#include <map>

#include "transport/base/error.h"
#include "transport/base/tag.h"

namespace hier::transport {
namespace {

std::string joinRanks(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

// The error a set of failed requests amounts to: the most telling kind first.
Error describeFailures(const std::vector<RequestPtr>& failed, std::chrono::milliseconds timeout,
                       const Communicator& communicator) {
  static const ErrorKind order[] = {ErrorKind::PeerFailure, ErrorKind::Mismatch, ErrorKind::Timeout,
                                    ErrorKind::Aborted,     ErrorKind::Internal, ErrorKind::InvalidUsage};
  std::map<ErrorKind, std::vector<RequestPtr>> byKind;
  for (auto& request : failed) byKind[request->errorKind()].push_back(request);
  ErrorKind kind = *std::find_if(std::begin(order), std::end(order), [&](ErrorKind k) { return byKind.count(k); });
  const auto& requests = byKind[kind];

  std::vector<int> peers;
  std::string details;
  for (auto& request : requests) {
    const int peer = request->peer >= 0 ? communicator.nameOf(request->peer) : -1;
    if (std::find(peers.begin(), peers.end(), peer) == peers.end()) peers.push_back(peer);
    if (!details.empty()) details += "; ";
    details += std::string(request->isReceive ? "receiving " : "sending ") + std::to_string(request->bytes) +
               " bytes " + (request->isReceive ? "from" : "to") + " rank " + std::to_string(peer);
    if (kind != ErrorKind::Timeout) details += ": " + request->errorMessage();
  }
  std::sort(peers.begin(), peers.end());
  std::string who = (peers.size() == 1 ? "rank " : "ranks ") + joinRanks(peers);
  switch (kind) {
    case ErrorKind::Timeout:
      return Error(kind, Deadline::timedOutAfter(timeout) + " waiting for " + who + " (" + details + ")", peers);
    case ErrorKind::PeerFailure: return Error(kind, "lost the connection to " + who + " (" + details + ")", peers);
    case ErrorKind::Mismatch:
      return Error(kind,
                   who + " disagreed on the message size (" + details +
                       "); every rank must pass matching sizes to this collective",
                   peers);
    default: return Error(kind, details, peers);
  }
}

}  // namespace

Collective::Collective(Group& group, uint64_t sequence, const Deadline& deadline, std::shared_ptr<const void> keepalive,
                       bool planning)
    : group_(group),
      sequence_(sequence),
      deadline_(deadline),
      step_(false),
      planning_(planning),
      holdings_(std::make_shared<Holdings>(Holdings{std::move(keepalive), nullptr})) {
  if (!planning_) driving_.emplace(group.communicator().engine());
}

Collective::Collective(Group& sub, const Collective& parent)
    : group_(sub),
      sequence_(parent.planning_ ? kPlanning : sub.nextSequence()),
      deadline_(parent.deadline_),
      step_(true),
      planning_(parent.planning_),
      holdings_(std::make_shared<Holdings>(Holdings{parent.holdings_->caller, nullptr})) {
  if (!planning_) driving_.emplace(sub.communicator().engine());
}

void Collective::checkMoves() const {
  if (planning_) throw Error(ErrorKind::Internal, "a schedule moved data in the pass that only enqueues device steps");
}

Collective::~Collective() {
  bool abandoned = false;
  for (auto& request : issued_) {
    if (!request->done()) {
      communicator().engine().fail(*request, ErrorKind::Aborted, "the collective failed on this rank");
      abandoned = true;
    }
  }
  // UCX may still write into the scratch area; the abandoned requests keep it alive, and the next
  // collective gets a fresh one.
  if (abandoned && holdings_->scratch) communicator().forgetScratch();
}

RequestPtr Collective::send(int peer, const void* data, size_t bytes, MemoryType memory) {
  checkMoves();
  auto request = communicator().send({peer, const_cast<void*>(data), bytes, memory,
                                      makeTag(communicator().groupId(), false, sequence_, uint32_t(rank())),
                                      deadline_.when, holdings_});
  issued_.push_back(request);
  return request;
}

RequestPtr Collective::receive(int peer, void* data, size_t bytes, MemoryType memory) {
  checkMoves();
  auto request = communicator().receive({peer, data, bytes, memory,
                                         makeTag(communicator().groupId(), false, sequence_, uint32_t(peer)),
                                         deadline_.when, holdings_});
  issued_.push_back(request);
  return request;
}

RequestPtr Collective::receiveUpTo(int peer, void* data, size_t capacity) {
  checkMoves();
  Communicator::Message message{peer,
                                data,
                                capacity,
                                MemoryType::Host,
                                makeTag(communicator().groupId(), false, sequence_, uint32_t(peer)),
                                deadline_.when,
                                holdings_};
  message.upTo = true;
  auto request = communicator().receive(message);
  issued_.push_back(request);
  return request;
}

void Collective::wait(std::vector<RequestPtr>& requests) {
  communicator().engine().wait(requests);
  std::vector<RequestPtr> failed;
  for (auto& request : requests) {
    if (!request->succeeded()) failed.push_back(request);
  }
  requests.clear();
  if (!failed.empty()) throw describeFailures(failed, deadline_.timeout, communicator());
}

void Collective::wait(RequestPtr request) {
  std::vector<RequestPtr> one{std::move(request)};
  wait(one);
}

char* Collective::scratch(size_t bytes) {
  // A second call could move the area under requests that use the first one.
  if (holdings_->scratch) throw Error(ErrorKind::Internal, "an algorithm asked for scratch memory twice");
  holdings_->scratch = communicator().scratch(bytes);
  return holdings_->scratch.get();
}

}  // namespace hier::transport
