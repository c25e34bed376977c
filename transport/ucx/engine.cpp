#include "transport/ucx/engine.h"

#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "transport/base/helper_thread.h"
#include "transport/base/host_identity.h"
#include "transport/base/log.h"
#include "transport/base/process_watch.h"
#include "transport/base/settings.h"
#include "transport/base/spin_budget.h"
#include "transport/ucx/net_devices.h"
#include "transport/ucx/status.h"

namespace hier::transport::ucx {
namespace {

// After a hand-over the idle progress thread dozes, looking for requests nobody drives every kDoze
// instead of being woken for each, until kDozeFor passed without one. An asynchronous transfer that
// nobody waits for then starts to be driven within kDoze; a blocking one never needs the thread.
constexpr std::chrono::milliseconds kDoze{1};
constexpr std::chrono::milliseconds kDozeFor{100};
// At most this many worker calls per drain, however many of them report progress.
constexpr int kDrainCalls = 256;

// How long a failure in a peer's shared memory waits to see whether that peer is on its way out.
constexpr int kDyingPeerMs = 200;

void signalEventFd(int fd) {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(fd, &one, sizeof one);
}

void drainEventFd(int fd) {
  uint64_t counter;
  while (read(fd, &counter, sizeof counter) > 0) {
  }
}

ucs_memory_type_t toUcx(MemoryType memory) {
  return memory == MemoryType::Cuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
}

// The transports of an endpoint as UCX chose them for its peer; UCX 1.14 added the query.
std::vector<std::string> transportsOf(ucp_ep_h ep) {
  std::vector<std::string> used;
#if UCP_API_VERSION >= UCP_VERSION(1, 14)
  ucp_transport_entry_t entries[16];
  ucp_ep_attr_t attr{};
  attr.field_mask = UCP_EP_ATTR_FIELD_TRANSPORTS;
  attr.transports.entries = entries;
  attr.transports.num_entries = 16;
  attr.transports.entry_size = sizeof(ucp_transport_entry_t);
  if (ucp_ep_query(ep, &attr) != UCS_OK) return used;
  for (unsigned i = 0; i < attr.transports.num_entries; ++i) {
    std::string entry = std::string(entries[i].transport_name) + "/" + entries[i].device_name;
    if (std::find(used.begin(), used.end(), entry) == used.end()) used.push_back(std::move(entry));
  }
#else
  (void)ep;
#endif
  return used;
}

// UCX before 1.16 leaves a receive's tag information unwritten when the receive completes at once
// (openucx/ucx#9425): there such receives always complete through their callback instead.
bool receivesReportImmediateCompletion() {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  return major > 1 || (major == 1 && minor >= 16);
}

std::mutex seenMutex;
TransportsSeen seen;

// Adds an endpoint's transports to what the process has seen, and says so the first time each is seen:
// the first connection to another host also checks that RDMA devices, where the host has them, are used.
void noteTransports(bool sameMachine, const std::vector<std::string>& used) {
  std::lock_guard<std::mutex> lock(seenMutex);
  auto& list = sameMachine ? seen.insideHost : seen.betweenHosts;
  const bool first = list.empty();
  std::string added;
  for (const auto& t : used) {
    if (std::find(list.begin(), list.end(), t) != list.end()) continue;
    list.push_back(t);
    added += (added.empty() ? "" : ", ") + t;
  }
  if (!added.empty()) {
    log(LogLevel::Info, std::string("UCX ") + version() + " reaches peers " +
                            (sameMachine ? "on this host" : "on other hosts") + " over " + added);
  }
  if (!sameMachine && first && !used.empty()) {
    if (auto warning = rdmaUnusedWarning(readHostDevices("/sys").hasRdmaDevices, used)) {
      log(LogLevel::Warning, *warning);
    }
  }
}

std::mutex engineMutex;
std::unordered_map<std::string, std::weak_ptr<Engine>> enginesByScope;
pid_t enginesPid = 0;

}  // namespace

bool Request::settle(State final, ErrorKind kind, std::string message) {
  uint32_t expected = Pending;
  if (!state_.compare_exchange_strong(expected, Settling, std::memory_order_acq_rel)) return false;
  errorKind_ = kind;
  errorMessage_ = std::move(message);
  state_.store(final, std::memory_order_release);
  state_.notify_all();
  if (owner_ != nullptr) {
    owner_->bumpGeneration();
    owner_->wakeLeader();
  }
  if (onSettled_) onSettled_(*this);
  return true;
}

void Request::awaitSettled() const {
  for (;;) {
    uint32_t s = state_.load(std::memory_order_acquire);
    if (s == Succeeded || s == Failed) return;
    state_.wait(s, std::memory_order_acquire);
  }
}

std::shared_ptr<Engine> Engine::acquire(const std::string& scope) {
  std::lock_guard<std::mutex> lock(engineMutex);
  // A forked child must not touch its parent's workers: it gets engines of its own.
  if (enginesPid != getpid()) {
    enginesByScope.clear();
    enginesPid = getpid();
  }
  auto& slot = enginesByScope[scope];
  if (auto engine = slot.lock()) return engine;
  std::shared_ptr<Engine> engine(new Engine());
  slot = engine;
  return engine;
}

Engine::Engine() : cancelGrace_(settings().cancelGrace) {
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) raise("reading the UCX configuration", status);
  // One network device per local rank (net_devices.h), unless the user told UCX which.
  if (const char* user = std::getenv("UCX_NET_DEVICES")) {
    netDevices_ = std::string(user) + " (UCX_NET_DEVICES)";
  } else {
    std::optional<NetChoice> choice;
    try {
      const char* override = std::getenv("HIER_NET_DEVICES");
      choice = chooseNetDevices(readHostDevices("/sys"), launcherLocalRank(), gpuBusId(), override ? override : "");
    } catch (...) {
      ucp_config_release(config);
      throw;
    }
    if (choice) {
      status = ucp_config_modify(config, "NET_DEVICES", choice->devices.c_str());
      if (status != UCS_OK) {
        ucp_config_release(config);
        raise("setting UCX's NET_DEVICES to " + choice->devices, status);
      }
      netDevices_ = choice->devices + ": " + choice->why;
    }
  }

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP | UCP_FEATURE_RMA;
  // Windows register memory (ucp_mem_map, a context call) on the user's thread while the worker
  // progresses on others.
  params.mt_workers_shared = 1;
  params.name = "hier";
  auto init = [&] {
    status = ucp_init(&params, config, &context_);
    if (status != UCS_OK) {
      ucp_config_release(config);
      raise("ucp_init", status);
    }
    ucp_context_attr_t contextAttr{};
    contextAttr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    memoryTypes_ = ucp_context_query(context_, &contextAttr) == UCS_OK ? contextAttr.memory_types : 0;
  };
  // Non-blocking TCP connects. With UCX's default (blocking), a connect to a peer that has just died
  // can fail inside ucp_ep_create before UCX marks the endpoint as able to send; UCX's TCP transport
  // then drops the endpoint without telling UCP, and the next send or flush on it aborts the process
  // (uct_tcp_ep_set_failed, UCX 1.22; docs/behaviour.md). The user's UCX_TCP_CONN_NB stands.
  if (std::getenv("UCX_TCP_CONN_NB") == nullptr) (void)ucp_config_modify(config, "TCP_CONN_NB", "y");
  init();
  // Rendezvous between hosts. For host memory over TCP, UCX's default has the sender write into the
  // receiver once the receiver answers "ready"; that answer travels on the receiver's outgoing stream,
  // and in an exchange (all-to-all, a send/recv pair) it can queue behind the receiver's own message
  // of many megabytes: the two directions then run one after the other, at random
  // (docs/measurements.md). The receiver's read (get) needs no answer. Only where UCX carries host
  // memory alone: the reading scheme also rules out the writing protocols UCX uses for CUDA memory,
  // which no machine here can try. The user's UCX_RNDV_SCHEME, if set, stands.
  // One cost: between ranks of one host that UCX carries without CMA (shared memory only), UCX has no
  // transport that reads, so it sends eagerly at every size, and sends into a dead peer's full queue
  // are retried until the watch on its process or the deadline ends them
  // (Failures.SendsIntoADeadPeersFullQueueFailInTime).
  if (!supports(MemoryType::Cuda) && std::getenv("UCX_RNDV_SCHEME") == nullptr &&
      ucp_config_modify(config, "RNDV_SCHEME", "get_zcopy") == UCS_OK) {
    ucp_cleanup(context_);
    init();
  }
  ucp_config_release(config);
  {
    std::lock_guard<std::mutex> lock(seenMutex);
    seen.netDevices = netDevices_;
    seen.takesCudaMemory = supports(MemoryType::Cuda);
  }

  // Several threads post and progress: the callers', the group executors' and the progress thread.
  ucp_worker_params_t workerParams{};
  workerParams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_FLAGS;
  workerParams.thread_mode = UCS_THREAD_MODE_MULTI;
  // Requests abandoned after a timeout are released with the worker; that is expected, not a leak.
  workerParams.flags = UCP_WORKER_FLAG_IGNORE_REQUEST_LEAK;
  status = ucp_worker_create(context_, &workerParams, &worker_);
  if (status != UCS_OK) {
    ucp_cleanup(context_);
    raise("ucp_worker_create", status);
  }
  ucp_worker_attr_t workerAttr{};
  workerAttr.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE | UCP_WORKER_ATTR_FIELD_ADDRESS;
  status = ucp_worker_query(worker_, &workerAttr);
  if (status != UCS_OK || workerAttr.thread_mode != UCS_THREAD_MODE_MULTI) {
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
    throw Error(ErrorKind::Internal, "UCX: this UCX build has no multi-threaded worker support (--enable-mt)");
  }
  // The address: the machine's identity (4 bytes of length, little-endian, then the text), this process
  // (ProcessIdentity, for a peer on this machine to watch), then UCX's.
  machine_ = machineIdentity();
  const auto machineBytes = uint32_t(machine_.size());
  for (int shift = 0; shift < 32; shift += 8) address_.push_back(uint8_t(machineBytes >> shift));
  address_.insert(address_.end(), machine_.begin(), machine_.end());
  const ProcessIdentity process = thisProcess();
  const auto* processBytes = reinterpret_cast<const uint8_t*>(&process);
  address_.insert(address_.end(), processBytes, processBytes + sizeof process);
  auto* bytes = reinterpret_cast<const uint8_t*>(workerAttr.address);
  address_.insert(address_.end(), bytes, bytes + workerAttr.address_length);
  ucp_worker_release_address(worker_, workerAttr.address);

  status = ucp_worker_get_efd(worker_, &workerFd_);
  if (status != UCS_OK) raise("ucp_worker_get_efd", status);
  wakeFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  leaderWakeFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  busyEpoll_ = epoll_create1(EPOLL_CLOEXEC);
  idleEpoll_ = epoll_create1(EPOLL_CLOEXEC);
  if (wakeFd_ < 0 || leaderWakeFd_ < 0 || busyEpoll_ < 0 || idleEpoll_ < 0) {
    throw Error(ErrorKind::Internal, std::string("creating the progress thread's fds: ") + std::strerror(errno));
  }
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = wakeFd_;
  epoll_ctl(busyEpoll_, EPOLL_CTL_ADD, wakeFd_, &event);
  epoll_ctl(idleEpoll_, EPOLL_CTL_ADD, wakeFd_, &event);
  event.data.fd = leaderWakeFd_;
  epoll_ctl(busyEpoll_, EPOLL_CTL_ADD, leaderWakeFd_, &event);
  event.data.fd = workerFd_;
  epoll_ctl(busyEpoll_, EPOLL_CTL_ADD, workerFd_, &event);

  progressThread_ = std::thread([this] { progressLoop(); });
  log(LogLevel::Info, "UCX engine ready: worker address of " + std::to_string(address_.size()) + " bytes, " +
                          (supports(MemoryType::Cuda) ? "CUDA memory supported" : "host memory only") +
                          ", network devices " + netDevices_);
}

Engine::~Engine() {
  stopping_.store(true);
  wakeProgressThread();
  if (progressThread_.joinable()) progressThread_.join();
  // Nobody may wait forever on a request of a worker that is going away.
  {
    std::vector<std::shared_ptr<Request>> left;
    {
      std::lock_guard<std::mutex> lock(outstandingMutex_);
      left.assign(outstanding_.begin(), outstanding_.end());
    }
    for (auto& request : left) request->settle(Request::Failed, ErrorKind::Aborted, "UCX was shut down");
  }
  closeEndpoints();
  // Whatever UCX still holds (requests abandoned after a timeout) goes with the worker.
  ucp_worker_destroy(worker_);
  ucp_cleanup(context_);
  for (int fd : {wakeFd_, leaderWakeFd_, busyEpoll_, idleEpoll_}) {
    if (fd >= 0) close(fd);
  }
}

bool Engine::supports(MemoryType memory) const { return (memoryTypes_ & UCS_BIT(toUcx(memory))) != 0; }

// ---- endpoints -----------------------------------------------------------------------------------

Engine::PeerAddress Engine::parse(const std::string& key) const {
  uint32_t machineBytes = 0;
  for (int i = 0; i < 4 && i < int(key.size()); ++i) machineBytes |= uint32_t(uint8_t(key[size_t(i)])) << (8 * i);
  PeerAddress peer;
  peer.ucx = 4 + size_t(machineBytes) + sizeof(ProcessIdentity);
  if (key.size() <= peer.ucx) {
    throw Error(ErrorKind::Internal, "UCX: a peer published a malformed address of " + std::to_string(key.size()) +
                                         " bytes (a different hier build?)");
  }
  peer.sameMachine = key.compare(4, machineBytes, machine_) == 0;
  std::memcpy(&peer.process, key.data() + 4 + machineBytes, sizeof peer.process);
  return peer;
}

int Engine::endpointToWatch(const std::vector<uint8_t>& address) {
  std::lock_guard<std::mutex> lock(endpointsMutex_);
  std::string key(address.begin(), address.end());
  if (auto it = endpointByAddress_.find(key); it != endpointByAddress_.end()) return it->second;
  const PeerAddress peer = parse(key);
  if (!peer.sameMachine) {
    // A peer on another machine is watched by UCX through a connection of this engine's own: without
    // one, a receive from a peer that dies waits for its deadline (this rank may never send to it).
    try {
      return connectLocked(key, peer);
    } catch (const Error&) {
      // UCX refused at once: the receives from the peer fail with the endpoint.
      const int index = endpointByAddress_.at(key);
      endpoints_[size_t(index)]->failed.store(true);
      return index;
    }
  }
  // No UCX endpoint yet (connect makes it for the first send): one to a process that is ending, whose
  // shared memory may be gone already, fails with errors in UCX's log, and a receive needs none; its
  // process is watched instead.
  return addEndpoint(std::move(key), watchProcess(peer.process));
}

int Engine::connect(const std::vector<uint8_t>& address) {
  std::lock_guard<std::mutex> lock(endpointsMutex_);
  std::string key(address.begin(), address.end());
  const PeerAddress peer = parse(key);
  return connectLocked(std::move(key), peer);
}

int Engine::connectLocked(std::string key, const PeerAddress& peer) {
  auto it = endpointByAddress_.find(key);
  Endpoint& endpoint = it != endpointByAddress_.end()
                           ? *endpoints_[size_t(it->second)]
                           : *endpoints_[size_t(addEndpoint(key, peer.sameMachine ? watchProcess(peer.process) : -1))];
  if (endpoint.ep != nullptr) return endpoint.index;

  ucp_ep_params_t params{};
  params.field_mask =
      UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(key.data() + peer.ucx);
  // Peer error handling for a peer on another machine only. UCX 1.22 has it on TCP alone, which is all
  // such a peer is reached by anyway; on one machine it would take shared memory away. With it, UCX
  // reports a broken connection to the handler (and fails the requests on it) where it would otherwise
  // log an error: a peer that closes first while this one flushes at shutdown, say. On one machine a
  // dead peer is caught by the watch on its process instead: the shared-memory arena's, for the ranks
  // waiting for it there (NodeArena), and this engine's, for requests on the endpoint (reap); the
  // handler still reports the failures UCX does detect.
  params.err_mode = peer.sameMachine ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = endpointErrorCallback;
  params.err_handler.arg = &endpoint;
  endpoint.peerErrorHandling = params.err_mode == UCP_ERR_HANDLING_MODE_PEER;
  ucs_status_t status = ucp_ep_create(worker_, &params, &endpoint.ep);
  if (status != UCS_OK) {
    endpoint.ep = nullptr;
    // Into a peer on this machine that has ended, UCX fails with whatever its shared memory says.
    const std::string why =
        endpoint.process != -1 && processEndsWithin(endpoint.process, kDyingPeerMs) ? "the peer's process ended; " : "";
    throw Error(ErrorKind::PeerFailure,
                why + "UCX could not make the connection (ucp_ep_create: " + ucs_status_string(status) + ")");
  }
  noteTransports(peer.sameMachine, transportsOf(endpoint.ep));
  return endpoint.index;
}

int Engine::addEndpoint(std::string key, int process) {
  auto endpoint = std::make_unique<Endpoint>();
  endpoint->engine = this;
  endpoint->index = int(endpoints_.size());
  endpoint->process = process;
  endpoints_.push_back(std::move(endpoint));
  endpointByAddress_.emplace(std::move(key), endpoints_.back()->index);
  return endpoints_.back()->index;
}

Engine::Endpoint::~Endpoint() {
  if (process >= 0) close(process);
}

void Engine::watchWith(Request& receive, int endpoint) {
  // reap reads endpoint_ under this lock.
  std::lock_guard<std::mutex> lock(outstandingMutex_);
  if (receive.endpoint_ < 0) receive.endpoint_ = endpoint;
}

bool Engine::endpointFailed(int endpoint) const {
  if (endpoint < 0) return false;
  std::lock_guard<std::mutex> lock(endpointsMutex_);
  return endpoint < int(endpoints_.size()) && endpoints_[endpoint]->failed.load();
}

bool Engine::endpointProcessEnded(int endpoint) const {
  if (endpoint < 0) return false;
  std::lock_guard<std::mutex> lock(endpointsMutex_);
  return endpoint < int(endpoints_.size()) &&
         (endpoints_[endpoint]->processEnded || processEnded(endpoints_[endpoint]->process));
}

void Engine::endpointErrorCallback(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* endpoint = static_cast<Endpoint*>(arg);
  endpoint->failed.store(true);
  // A peer that shuts down closes its connections: routine, unless a request still needed the peer,
  // and then that request fails with an error of its own.
  log(LogLevel::Debug, std::string("UCX lost a peer connection: ") + ucs_status_string(status));
  // Requests on this endpoint are failed by the progress thread; UCX calls are not safe from here.
  endpoint->engine->reapRequested_.store(true);
  endpoint->engine->wakeProgressThread();
}

void Engine::closeEndpoints() {
  std::vector<void*> closing;
  {
    std::lock_guard<std::mutex> lock(endpointsMutex_);
    for (auto& endpoint : endpoints_) {
      // A flushing close, bounded by the wait below so that a peer that is gone cannot hold up
      // shutdown; a failed endpoint with peer error handling is closed by force, as a flush on it
      // would only queue behind a connection UCX has given up on (UCX rejects a forced close of an
      // endpoint without peer error handling).
      ucp_request_param_t param{};
      if (endpoint->ep == nullptr) continue;  // made for watching only (endpointToWatch)
      if (endpoint->failed.load() && endpoint->peerErrorHandling) {
        param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        param.flags = UCP_EP_CLOSE_FLAG_FORCE;
      }
      ucs_status_ptr_t handle = ucp_ep_close_nbx(endpoint->ep, &param);
      if (handle != nullptr && !UCS_PTR_IS_ERR(handle)) closing.push_back(handle);
    }
    endpoints_.clear();
    endpointByAddress_.clear();
  }
  auto until = Clock::now() + cancelGrace_;
  for (void* handle : closing) {
    while (ucp_request_check_status(handle) == UCS_INPROGRESS && Clock::now() < until) {
      ucp_worker_progress(worker_);
    }
    ucp_request_free(handle);
  }
}

// ---- requests ------------------------------------------------------------------------------------

std::shared_ptr<Request> Engine::makeRequest(const Message& message, int endpoint, bool isReceive) {
  auto request = std::make_shared<Request>();
  request->owner_ = this;
  request->peer = message.peer;
  request->isReceive = isReceive;
  request->bytes = message.bytes;
  request->deadline = message.deadline;
  request->endpoint_ = endpoint;
  request->keepalive_ = message.keepalive;
  request->onSettled_ = message.onSettled;
  request->standing_ = message.standing;
  request->upTo_ = message.upTo;
  return request;
}

void Engine::track(const std::shared_ptr<Request>& request) {
  {
    std::lock_guard<std::mutex> lock(outstandingMutex_);
    request->inFlight_ = true;
    request->self_ = outstanding_.insert(outstanding_.end(), request);
  }
  outstandingCount_.fetch_add(1);
  if (request->standing_) {
    // Polled for every tick. The progress thread may be asleep without a timeout (nothing was
    // outstanding): wake it so that it starts to. Standing requests are rare, so this costs nothing.
    if (progressThreadIdle_.load()) wakeProgressThread();
    return;
  }
  drivenCount_.fetch_add(1);
}

void Engine::handOver(const Request& request) {
  // The progress thread only needs waking when nobody else drives the worker (see progressLoop), and
  // only for a request UCX did not complete on the spot (a small send usually is).
  if (!request.standing_ && !request.done() && drivers_.load() == 0) handOverSoon();
}

void Engine::handOverSoon() {
  handedOver_.store(true);
  if (progressThreadIdle_.load() && !progressThreadDozing_.load()) wakeProgressThread();
}

std::shared_ptr<Request> Engine::send(int endpoint, const Message& message) {
  auto request = makeRequest(message, endpoint, /*isReceive=*/false);
  ucp_ep_h ep;
  {
    std::lock_guard<std::mutex> lock(endpointsMutex_);
    ep = endpoints_.at(endpoint)->ep;
    request->process_ = endpoints_[endpoint]->process;
    if (endpoints_[endpoint]->failed.load()) {
      request->settle(Request::Failed, ErrorKind::PeerFailure, "the connection to this peer failed earlier");
      return request;
    }
  }
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
  param.cb.send = sendCallback;
  param.user_data = request.get();
  param.memory_type = toUcx(message.memory);

  track(request);
  adopt(request, ucp_tag_send_nbx(ep, message.data, message.bytes, message.tag, &param), nullptr);
  handOver(*request);
  return request;
}

std::shared_ptr<Request> Engine::receive(const Message& message, uint64_t mask, int endpoint) {
  auto request = makeRequest(message, endpoint, /*isReceive=*/true);
  ucp_tag_recv_info_t info{};
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMORY_TYPE |
                       UCP_OP_ATTR_FIELD_RECV_INFO;
  param.cb.recv = receiveCallback;
  param.user_data = request.get();
  param.memory_type = toUcx(message.memory);
  param.recv_info.tag_info = &info;
  static const bool immediate = receivesReportImmediateCompletion();
  if (!immediate) param.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;

  track(request);
  adopt(request, ucp_tag_recv_nbx(worker_, message.data, message.bytes, message.tag, mask, &param), &info);
  handOver(*request);
  return request;
}

void Engine::adopt(const std::shared_ptr<Request>& request, ucs_status_ptr_t handle, const ucp_tag_recv_info_t* info) {
  if (handle == nullptr) {
    retire(*request, UCS_OK, info);  // completed inline; UCX calls no callback
  } else if (UCS_PTR_IS_ERR(handle)) {
    retire(*request, UCS_PTR_STATUS(handle), nullptr);
  } else {
    request->ucx_.store(handle, std::memory_order_release);
    releaseHandle(*request);  // the issuer's share
  }
}

void Engine::sendCallback(void*, ucs_status_t status, void* user) {
  auto* request = static_cast<Request*>(user);
  auto keep = request->owner_->retire(*request, status, nullptr);
  request->owner_->releaseHandle(*request);  // the completion's share
}

void Engine::receiveCallback(void*, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  auto* request = static_cast<Request*>(user);
  auto keep = request->owner_->retire(*request, status, info);
  request->owner_->releaseHandle(*request);
}

std::shared_ptr<Request> Engine::retire(Request& request, ucs_status_t status, const ucp_tag_recv_info_t* info) {
  // UCX is done with the memory: take the request off the outstanding list and let the caller's memory
  // go, before the request settles. Whoever waits for it then finds the memory let go of, or kept for
  // it where this is the progress thread (plugin/held_tensors.hpp).
  std::shared_ptr<Request> self;
  {
    std::shared_ptr<const void> keepalive;  // goes after the lock
    std::lock_guard<std::mutex> lock(outstandingMutex_);
    if (request.inFlight_) {
      request.inFlight_ = false;
      self = std::move(*request.self_);
      outstanding_.erase(request.self_);
      keepalive = std::move(request.keepalive_);
    }
  }
  if (status == UCS_OK && request.isReceive && info != nullptr) {
    request.receivedBytes_ = info->length;
    request.senderTag_ = info->sender_tag;
  }
  if (status == UCS_OK && request.isReceive && info != nullptr && info->length != request.bytes && !request.upTo_) {
    request.settle(Request::Failed, ErrorKind::Mismatch,
                   "received " + std::to_string(info->length) + " bytes where " + std::to_string(request.bytes) +
                       " were expected");
  } else if (status == UCS_OK) {
    request.settle(Request::Succeeded, ErrorKind::Internal, {});
  } else if (status == UCS_ERR_MESSAGE_TRUNCATED) {
    request.settle(Request::Failed, ErrorKind::Mismatch,
                   "the peer sent more than the " + std::to_string(request.bytes) + " bytes expected");
  } else if (kindOf(status) == ErrorKind::Internal && request.process_ != -1 &&
             processEndsWithin(request.process_, kDyingPeerMs)) {
    // A send into a dead peer's shared memory fails as UCX finds it gone ("Shared memory error"): the
    // peer's failure, not this rank's. A peer being killed loses its memory just before it ends.
    request.settle(Request::Failed, ErrorKind::PeerFailure,
                   std::string("the peer's process ended (UCX: ") + ucs_status_string(status) + ")");
  } else {
    // A cancelled request was usually settled already (timeout, peer failure, abort); then this is moot.
    request.settle(Request::Failed, kindOf(status), std::string("UCX: ") + ucs_status_string(status));
  }
  if (!self) return nullptr;
  if (!request.standing_) drivenCount_.fetch_sub(1);
  outstandingCount_.fetch_sub(1);
  return self;
}

void Engine::releaseHandle(Request& request) {
  // Whoever lets go last frees the handle; the issuer published it before letting go.
  if (request.handleRefs_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    if (void* handle = request.ucx_.load(std::memory_order_acquire)) ucp_request_free(handle);
  }
}

void Engine::cancel(Request& request) {
  int refs = request.handleRefs_.load();
  do {
    if (refs == 0) return;  // UCX completed it and the handle is gone
  } while (!request.handleRefs_.compare_exchange_weak(refs, refs + 1));
  if (void* handle = request.ucx_.load(std::memory_order_acquire)) {
    request.cancelled_ = true;
    ucp_request_cancel(worker_, handle);  // may run the completion callback right here
  }
  releaseHandle(request);
}

void Engine::fail(Request& request, ErrorKind kind, const std::string& message) {
  if (request.settle(Request::Failed, kind, message)) cancel(request);
}

// ---- waiting and progress ------------------------------------------------------------------------

Engine::Driving::Driving(Engine& engine) : engine_(engine) { engine_.drivers_.fetch_add(1); }

Engine::Driving::~Driving() {
  // The last driver to leave hands what is still outstanding to the progress thread.
  if (engine_.drivers_.fetch_sub(1) == 1 && (engine_.drivenCount_.load() > 0 || engine_.exposedCount_.load() > 0)) {
    engine_.handOverSoon();
  }
}

void Engine::wait(const std::vector<std::shared_ptr<Request>>& requests) {
  auto allDone = [&] {
    for (auto& request : requests) {
      if (!request->done()) return false;
    }
    return true;
  };
  if (allDone()) return;
  Driving driving(*this);

  // Drive the worker for a short while first: most messages arrive within microseconds, and going to
  // sleep and waking up costs more than that (for as long as spinBudget() says, which the shared-memory
  // waits learn). Yield now and then so that, with more ranks than cores, the peer we wait for gets to run.
  // The clock is read whether or not UCX reported progress: a worker can report progress on every call
  // for as long as a peer is gone (below), and the spin must still end.
  const auto until = Clock::now() + spinBudget();
  unsigned idle = 0;
  for (unsigned calls = 1; !allDone(); ++calls) {
    if (ucp_worker_progress(worker_) != 0) {
      idle = 0;
    } else if (++idle % 32 == 0) {
      sched_yield();
    }
    if (calls % 32 == 0 && Clock::now() >= until) break;
  }

  // Then sleep. One waiting thread at a time (the leader) sleeps on the worker's wakeup fd and
  // progresses when UCX signals, so a message wakes the thread that wants it directly; any other waiter
  // sleeps until a request settles or the leader steps down.
  while (!allDone()) {
    bool vacant = false;
    if (leader_.compare_exchange_strong(vacant, true)) {
      lead(allDone);
      leader_.store(false);
      bumpGeneration();  // a parked waiter may take the lead now
      continue;
    }
    uint64_t generation = generation_.load();
    if (allDone() || !leader_.load()) continue;
    generation_.wait(generation);
  }
}

template <typename Done>
void Engine::lead(const Done& done) {
  epoll_event events[3];
  auto lastReap = Clock::now();
  while (!done()) {
    // Sleep only when UCX has nothing to do ("busy" from arm: events arrived meanwhile). Another
    // thread may still settle what this one waits for (wakeLeader): the flag is raised before the
    // last look at done(), and a settling thread looks at the flag after settling, so one of the two
    // sees the other.
    if (ucp_worker_progress(worker_) == 0 && ucp_worker_arm(worker_) != UCS_ERR_BUSY) {
      leaderAsleep_.store(true, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      const int ready = done() ? 0 : epoll_wait(busyEpoll_, events, 3, int(settings().progressTick.count()));
      leaderAsleep_.store(false, std::memory_order_relaxed);
      for (int i = 0; i < ready; ++i) {
        if (events[i].data.fd == leaderWakeFd_) drainEventFd(leaderWakeFd_);
      }
    }
    // While a thread leads, the progress thread sleeps: the leader enforces the deadlines, and does so
    // even when UCX reports progress on every call. It can, for as long as the peer is gone: a send into
    // a dead peer's full shared-memory queue is retried, and counted, at each call.
    auto now = Clock::now();
    if (reapRequested_.exchange(false) || now - lastReap >= settings().progressTick) {
      reap(now);
      lastReap = now;
    }
  }
}

void Engine::bumpGeneration() {
  generation_.fetch_add(1);
  generation_.notify_all();
}

void Engine::drainWorker() {
  // Bounded, for the reason given in lead(): the callers have deadlines to enforce after it.
  for (int calls = 0; calls < kDrainCalls && ucp_worker_progress(worker_) != 0; ++calls) {
  }
}

void Engine::wakeLeader() {
  std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with lead()'s, see there
  if (leaderAsleep_.load(std::memory_order_relaxed)) signalEventFd(leaderWakeFd_);
}

void Engine::wakeProgressThread() { signalEventFd(wakeFd_); }

void Engine::progressLoop() {
  pthread_setname_np(pthread_self(), "hier-progress");
  markHelperThread();
  const auto tick = settings().progressTick;
  auto lastReap = Clock::now();
  auto lastHandOver = Clock::time_point{}, lastLook = Clock::time_point{};
  epoll_event events[3];
  while (!stopping_.load()) {
    if (handedOver_.exchange(false)) lastHandOver = Clock::now();
    // Busy: requests are outstanding and no thread waits for any of them, so this thread must
    // progress them (an asynchronous send nobody waits for yet, say) and watch their deadlines.
    // Or memory is exposed (ExposedMemory), and writes into it must land whatever this rank does.
    if ((drivenCount_.load() > 0 || exposedCount_.load() > 0) && drivers_.load() == 0) {
      drainWorker();
      // Sleep unless events arrived meanwhile; either way go on to the deadlines below.
      if (ucp_worker_arm(worker_) != UCS_ERR_BUSY) epoll_wait(busyEpoll_, events, 3, int(tick.count()));
    } else {
      // Idle, and dozing or not. Publish both before the last look, so that a thread that adds work
      // sees them: it wakes this one unless it dozes (then this one looks again within kDoze).
      const bool dozing = Clock::now() - lastHandOver < kDozeFor;
      progressThreadIdle_.store(true);
      progressThreadDozing_.store(dozing);
      if (((drivenCount_.load() > 0 || exposedCount_.load() > 0) && drivers_.load() == 0) || stopping_.load()) {
        progressThreadDozing_.store(false);
        progressThreadIdle_.store(false);
        continue;
      }
      const bool ticking = outstandingCount_.load() > 0 || exposedCount_.load() > 0;
      const int timeout = dozing ? int(kDoze.count()) : ticking ? int(tick.count()) : -1;
      epoll_wait(idleEpoll_, events, 2, timeout);
      progressThreadDozing_.store(false);
      progressThreadIdle_.store(false);
      // Standing receives (failure notices) are looked for once a tick, whoever else drives the worker
      // (it is thread-safe): a rank between operations, or asleep in a shared-memory wait inside a
      // collective (whose Driving scope is open, but which drives nothing meanwhile), still hears a
      // notice within a tick, and writes into its exposed memory land. Not at every doze: a driver in
      // the middle of a large transfer holds the worker's lock, and this thread would spin on it.
      const auto now = Clock::now();
      const bool looking = outstandingCount_.load() > drivenCount_.load() || exposedCount_.load() > 0;
      if (looking && (!dozing || now - lastLook >= tick)) {
        drainWorker();
        lastLook = now;
      }
    }
    drainEventFd(wakeFd_);
    // A wake meant for a leader that woke for another reason first; left, it would keep busyEpoll_
    // ready and turn the sleeps above into spins.
    drainEventFd(leaderWakeFd_);
    auto now = Clock::now();
    if (reapRequested_.exchange(false) || now - lastReap >= tick) {
      reap(now);
      lastReap = now;
    }
  }
}

void Engine::reap(Clock::time_point now) {
  // Why each endpoint failed, or null.
  std::vector<const char*> failedEndpoints;
  {
    std::lock_guard<std::mutex> lock(endpointsMutex_);
    for (auto& endpoint : endpoints_) {
      // A peer on this machine whose process ended: UCX does not say so there (connect), so look.
      if (!endpoint->failed.load() && processEnded(endpoint->process)) {
        endpoint->processEnded = true;
        endpoint->failed.store(true);
      }
      failedEndpoints.push_back(!endpoint->failed.load() ? nullptr
                                : endpoint->processEnded ? "the peer's process ended"
                                                         : "the connection to the peer failed");
    }
  }
  // A peer that finished and closed its connections may have sent its last messages just before: eager
  // sends complete at the sender once handed over, so they can still sit in UCX's queues here. Deliver
  // what already arrived before failing the receives that wait for that peer.
  auto failed = [](const char* why) { return why != nullptr; };
  if (std::any_of(failedEndpoints.begin(), failedEndpoints.end(), failed)) drainWorker();
  std::vector<std::pair<std::shared_ptr<Request>, const char*>> victims;
  {
    std::lock_guard<std::mutex> lock(outstandingMutex_);
    for (auto& request : outstanding_) {
      if (request->done()) continue;
      if (now >= request->deadline) {
        victims.emplace_back(request, nullptr);
      } else if (request->endpoint_ >= 0 && request->endpoint_ < int(failedEndpoints.size()) &&
                 failed(failedEndpoints[request->endpoint_])) {
        victims.emplace_back(request, failedEndpoints[request->endpoint_]);
      }
    }
  }
  for (auto& [request, why] : victims) {
    if (why == nullptr)
      fail(*request, ErrorKind::Timeout, "deadline passed");
    else
      fail(*request, ErrorKind::PeerFailure, why);
  }
}

size_t Engine::outstanding() const { return size_t(outstandingCount_.load()); }

std::string Engine::describe() const {
  std::string text;
  auto now = Clock::now();
  std::lock_guard<std::mutex> lock(outstandingMutex_);
  for (auto& request : outstanding_) {
    text += std::string(request->isReceive ? "receive from" : "send to") + " rank " + std::to_string(request->peer) +
            ", " + std::to_string(request->bytes) + " bytes, " + (request->done() ? "abandoned" : "pending");
    if (request->deadline != Clock::time_point::max()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(request->deadline - now).count();
      text += ", deadline in " + std::to_string(left) + " ms";
    }
    text += "\n";
  }
  return text;
}

TransportsSeen transportsSeen() {
  std::lock_guard<std::mutex> lock(seenMutex);
  return seen;
}

std::string version() {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

}  // namespace hier::transport::ucx
