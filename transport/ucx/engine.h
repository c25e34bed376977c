// The process's UCX context, worker and progress engine.
//
// One engine per rank, shared by every communicator of that rank: one worker address for peers to reach,
// one endpoint per peer whichever groups the two share. A rank is normally a process; when threads act
// as ranks, each asks for the engine of its own scope. Progress is event driven. A thread waiting
// on requests first drives the worker itself for a short spin, then sleeps on the worker's wakeup fd
// (one waiting thread at a time; others sleep until it steps down or their requests settle), so a
// message wakes the thread that wants it directly; a thread that settles the sleeper's request itself
// (having consumed the event, or failing it) wakes it too. When no thread waits and requests are
// outstanding, a progress thread sleeps on the fd instead; it takes such requests over at once, or
// within a millisecond while hand-overs are frequent (handOverSoon). No thread burns a core while it waits.
// Whoever sleeps on the fd also enforces deadlines: a request past its deadline is cancelled and fails,
// so nothing waits forever.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "transport/base/process_watch.h"
#include "transport/base/types.h"
#include "transport/ucx/request.h"

namespace hier::transport::ucx {

// UCX's version, as "1.22.0", for diagnostics.
std::string version();

// The UCX transports and devices ("tcp/eth0", "rc_mlx5/mlx5_0:1") this process's endpoints use so far,
// to peers on other hosts and on this one, and the network devices of its last engine; for
// torch_hier.info(). Empty lists under UCX before 1.14, which cannot say.
struct TransportsSeen {
  std::vector<std::string> betweenHosts;
  std::vector<std::string> insideHost;
  std::string netDevices;
  std::optional<bool> takesCudaMemory;  // the last engine's UCX lists CUDA memory; unknown before one
};
TransportsSeen transportsSeen();

class Engine {
 public:
  // The engine of `scope` ("" for the process's), created on first use and destroyed when the last user
  // releases it. Ranks sharing a process need distinct scopes: tags do not name the receiving rank.
  static std::shared_ptr<Engine> acquire(const std::string& scope = "");
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // What a peer needs to connect to this engine, to publish through the bootstrap: this machine's
  // identity, then UCX's worker address.
  const std::vector<uint8_t>& address() const { return address_; }
  bool supports(MemoryType memory) const;
  // Which network devices UCX uses between hosts, and why (net_devices.h).
  const std::string& netDevices() const { return netDevices_; }

  // The endpoint index for the peer engine at `address` (another engine's address()), created on first
  // use and reused after.
  int connect(const std::vector<uint8_t>& address);
  // For a receive from the engine at `address`: the existing endpoint, else, for a peer on another
  // machine, a connected one (connect), and for a peer on this machine one with no UCX endpoint in it
  // yet (connect adds that). A receive on it fails (reap) once UCX fails the connection, or once the
  // peer's process ends, where that process is on this machine and watchProcess can watch it (UCX does
  // not report it there).
  int endpointToWatch(const std::vector<uint8_t>& address);
  // Gives `receive`, posted before its peer's endpoint was known (the peer had not published its address
  // yet), that endpoint, so that it fails with it; a request that has one keeps it.
  void watchWith(Request& receive, int endpoint);
  // True when UCX reported the endpoint's peer unreachable.
  bool endpointFailed(int endpoint) const;
  // Whether the process of the endpoint's peer, on this machine, has ended, looked at now (without
  // failing the endpoint's requests: reap() does that); false where its process is not watched.
  bool endpointProcessEnded(int endpoint) const;

  struct Message {
    void* data;
    size_t bytes;
    MemoryType memory;
    uint64_t tag;
    int peer;  // rank of the peer in the caller's communicator; only for error messages
    Clock::time_point deadline;
    std::shared_ptr<const void> keepalive;  // kept until UCX is done with `data`
    // Called once the request settles, on whichever thread settles it (possibly inside a UCX callback):
    // it must only hand the news on, never call back into UCX.
    std::function<void(const Request&)> onSettled;
    // A receive posted ahead for a message that may never come (a failure notice). Nobody waits for it,
    // and it must not keep the progress thread watching the worker, which would then wake for every
    // message of every operation: the progress thread polls for it once a tick instead.
    bool standing = false;
    // A receive that takes any message up to `bytes` long (receivedBytes() tells how long it was);
    // otherwise a message of another length fails it as a mismatch.
    bool upTo = false;
  };
  std::shared_ptr<Request> send(int endpoint, const Message& message);
  // Receives a message whose tag matches `message.tag` on the bits set in `mask`. `endpoint` is the
  // sender's endpoint index when known (so its failure fails the receive at once), else -1.
  std::shared_ptr<Request> receive(const Message& message, uint64_t mask, int endpoint);

  // ---- one-sided writes (remote_memory.cpp) ----
  // Memory of this rank that peers may write into while this lives; key() is what a peer needs to
  // (UCX's packed remote key). While any lives, the progress thread watches the worker even with nothing
  // outstanding: UCX carries some writes (over TCP, or shared memory without CMA) as messages that this
  // side must progress for them to land, and the rank may be computing meanwhile.
  class ExposedMemory {
   public:
    ~ExposedMemory();
    ExposedMemory(const ExposedMemory&) = delete;
    ExposedMemory& operator=(const ExposedMemory&) = delete;
    const std::vector<uint8_t>& key() const { return key_; }

   private:
    friend class Engine;
    ExposedMemory(Engine& engine, ucp_mem_h memory);
    Engine& engine_;
    ucp_mem_h memory_;
    std::vector<uint8_t> key_;
  };
  std::unique_ptr<ExposedMemory> expose(void* data, size_t bytes);

  // A peer's ExposedMemory::key(), made usable through the endpoint that reaches that peer.
  class RemoteKey {
   public:
    ~RemoteKey();
    RemoteKey(const RemoteKey&) = delete;
    RemoteKey& operator=(const RemoteKey&) = delete;

   private:
    friend class Engine;
    explicit RemoteKey(ucp_rkey_h key) : key_(key) {}
    ucp_rkey_h key_;
  };
  std::shared_ptr<RemoteKey> unpack(int endpoint, const std::vector<uint8_t>& key);

  struct Write {
    const void* data = nullptr;  // host memory
    size_t bytes = 0;            // none: only the message goes
    uint64_t remoteAddress = 0;
    std::shared_ptr<RemoteKey> key;  // held until UCX is done with the write
  };
  // Writes `write` into the peer's exposed memory, then sends `message` to the peer once the peer's
  // memory holds every write this engine made to it so far (UCX's flush of the endpoint): a peer that
  // receives the message finds the data in place. The request is the message's send; it fails when the
  // write or the flush fails, and holds `write.data`'s keepalive (message.keepalive) until UCX is done.
  std::shared_ptr<Request> writeThenSend(int endpoint, const Write& write, const Message& message);

  // While one of these lives, its thread promises to wait for its requests soon (a collective in
  // progress): issuing a request then leaves the progress thread asleep.
  class Driving {
   public:
    explicit Driving(Engine& engine);
    ~Driving();
    Driving(const Driving&) = delete;
    Driving& operator=(const Driving&) = delete;

   private:
    Engine& engine_;
  };

  // Blocks until every request is done (successfully or not); see the class comment for how.
  void wait(const std::vector<std::shared_ptr<Request>>& requests);
  void wait(const std::shared_ptr<Request>& request) { wait(std::vector<std::shared_ptr<Request>>{request}); }
  // Fails a pending request now and asks UCX to cancel it; UCX keeps the memory until it lets go.
  void fail(Request& request, ErrorKind kind, const std::string& message);

  // Counts and waits; exposed for tests and diagnostics.
  size_t outstanding() const;
  std::string describe() const;

 private:
  friend class Request;  // settling a request wakes parked waiters
  Engine();
  void progressLoop();
  void wakeProgressThread();
  // Gives the requests nobody drives to the progress thread: at once when it sleeps, or at its next look
  // (within kDoze) when it dozes, as it does for a while after each hand-over. A blocking send or
  // receive posts, hands over (nobody drives yet) and waits right away: waking the progress thread for
  // each such message cost a context switch on a busy core (a third of a small ping-pong's time).
  void handOverSoon();
  // Progresses the worker until it has nothing more to do right now, or for kDrainCalls calls at most.
  void drainWorker();
  // Sleeps on the worker's wakeup fd and progresses until done() (the leading waiter's loop).
  template <typename Done>
  void lead(const Done& done);
  // Tells parked waiters that something changed (a request settled, the leader stepped down).
  void bumpGeneration();
  // A request settled: wakes the leader when it sleeps. The thread that settled it (the progress
  // thread's look for standing receives, or a waiter still spinning) consumed the UCX events that would
  // have woken the leader, which would otherwise sleep to the end of its tick (up to 100 ms).
  void wakeLeader();
  // Fails requests past their deadline or whose peer failed, and cancels them in UCX.
  void reap(Clock::time_point now);
  std::shared_ptr<Request> makeRequest(const Message& message, int endpoint, bool isReceive);
  // Puts a request on the outstanding list, before UCX may complete it.
  void track(const std::shared_ptr<Request>& request);
  // After posting: hands the request to the progress thread when it still needs driving and nobody
  // drives.
  void handOver(const Request& request);
  // Records UCX's verdict on a request and takes it off the outstanding list.
  // Returns the request's last list reference, so the caller can finish with it before it may go.
  std::shared_ptr<Request> retire(Request& request, ucs_status_t status, const ucp_tag_recv_info_t* info);
  // Hands the UCX handle over to the request, or retires the request when UCX finished it inline.
  void adopt(const std::shared_ptr<Request>& request, ucs_status_ptr_t handle, const ucp_tag_recv_info_t* info);
  void releaseHandle(Request& request);
  void cancel(Request& request);
  void closeEndpoints();

  static void sendCallback(void* handle, ucs_status_t status, void* user);
  static void receiveCallback(void* handle, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user);
  static void endpointErrorCallback(void* arg, ucp_ep_h ep, ucs_status_t status);
  // writeThenSend's flush completed: sends its message, on the thread that completed the flush.
  struct AfterFlush {
    Engine* engine;
    std::shared_ptr<Request> request;
    ucp_ep_h ep;
    const void* data;
    size_t bytes;
    uint64_t tag;
    std::shared_ptr<std::atomic<int>> written;  // the write's verdict (writeCallback), a ucs_status_t
  };
  static void writeCallback(void* handle, ucs_status_t status, void* user);
  static void flushCallback(void* handle, ucs_status_t status, void* user);
  void sendAfterFlush(const AfterFlush& after, ucs_status_t flushed);

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::vector<uint8_t> address_;
  std::string machine_;  // machineIdentity(), the head of address_
  uint64_t memoryTypes_ = 0;
  std::string netDevices_ = "all (UCX's own choice)";

  // What a peer's address() says (after the machine's identity, the process; then UCX's address, from
  // byte `ucx` on).
  struct PeerAddress {
    bool sameMachine = false;
    ProcessIdentity process;
    size_t ucx = 0;
  };
  PeerAddress parse(const std::string& key) const;
  // Adds an endpoint for `key` with no UCX endpoint yet; under endpointsMutex_.
  int addEndpoint(std::string key, int process);
  // connect(), under endpointsMutex_.
  int connectLocked(std::string key, const PeerAddress& peer);

  struct Endpoint {
    ucp_ep_h ep = nullptr;  // made by connect; none yet for a peer on this machine only received from
    std::atomic<bool> failed{false};
    bool peerErrorHandling = false;  // made with UCP_ERR_HANDLING_MODE_PEER: may be closed by force
    Engine* engine = nullptr;
    int index = -1;
    int process = -1;  // a pidfd of the peer's process, where it is on this machine, or kProcessGone (watchProcess)
    bool processEnded = false;  // why it failed, when it did: set with `failed`, under endpointsMutex_
    ~Endpoint();
  };
  mutable std::mutex endpointsMutex_;
  std::unordered_map<std::string, int> endpointByAddress_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;

  // Requests UCX has not finished with. The progress thread scans it for deadlines.
  mutable std::mutex outstandingMutex_;
  std::list<std::shared_ptr<Request>> outstanding_;
  std::atomic<int> outstandingCount_{0};
  // Of those, the ones that are not standing (Message::standing): what someone must drive.
  std::atomic<int> drivenCount_{0};
  // ExposedMemory alive: the progress thread then watches the worker whoever else drives it.
  std::atomic<int> exposedCount_{0};

  // Threads that drive the worker themselves (spinning, leading or parked in wait(), or inside a
  // Driving scope). While there is one, the progress thread stays asleep.
  std::atomic<int> drivers_{0};
  std::atomic<bool> leader_{false};
  std::atomic<bool> leaderAsleep_{false};  // the leader is in (or about to enter) its epoll_wait
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> progressThreadIdle_{false};
  std::atomic<bool> progressThreadDozing_{false};  // idle, but looks again within kDoze by itself
  std::atomic<bool> handedOver_{false};            // a hand-over since the progress thread last looked
  std::atomic<bool> stopping_{false};
  std::atomic<bool> reapRequested_{false};
  int workerFd_ = -1;
  int wakeFd_ = -1;        // wakes the progress thread
  int leaderWakeFd_ = -1;  // wakes the leader (wakeLeader)
  int busyEpoll_ = -1;     // both eventfds and the worker's fd
  int idleEpoll_ = -1;     // the progress thread's eventfd only
  std::thread progressThread_;

  std::chrono::milliseconds cancelGrace_;
};

}  // namespace hier::transport::ucx
