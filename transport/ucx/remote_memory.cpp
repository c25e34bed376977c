// The engine's one-sided writes (engine.h): exposing memory, unpacking a peer's key, and a write
// followed by a message that tells the peer the write landed.
#include <algorithm>
#include <cstring>

#include "transport/ucx/engine.h"
#include "transport/ucx/status.h"

namespace hier::transport::ucx {

std::unique_ptr<Engine::ExposedMemory> Engine::expose(void* data, size_t bytes) {
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  params.address = data;
  params.length = bytes;
  ucp_mem_h memory = nullptr;
  ucs_status_t status = ucp_mem_map(context_, &params, &memory);
  if (status != UCS_OK) raise("registering " + std::to_string(bytes) + " bytes for one-sided writes", status);
  std::unique_ptr<ExposedMemory> exposed(new ExposedMemory(*this, memory));
  void* packed = nullptr;
  size_t packedBytes = 0;
  status = ucp_rkey_pack(context_, memory, &packed, &packedBytes);
  if (status != UCS_OK) raise("packing a remote key", status);
  const auto* begin = static_cast<const uint8_t*>(packed);
  exposed->key_.assign(begin, begin + packedBytes);
  ucp_rkey_buffer_release(packed);
  return exposed;
}

Engine::ExposedMemory::ExposedMemory(Engine& engine, ucp_mem_h memory) : engine_(engine), memory_(memory) {
  // From now on the progress thread watches the worker (progressLoop): wake it from an endless sleep.
  engine_.exposedCount_.fetch_add(1);
  engine_.wakeProgressThread();
}

Engine::ExposedMemory::~ExposedMemory() {
  ucp_mem_unmap(engine_.context_, memory_);
  engine_.exposedCount_.fetch_sub(1);
}

std::shared_ptr<Engine::RemoteKey> Engine::unpack(int endpoint, const std::vector<uint8_t>& key) {
  ucp_ep_h ep;
  {
    std::lock_guard<std::mutex> lock(endpointsMutex_);
    ep = endpoints_.at(size_t(endpoint))->ep;
  }
  if (ep == nullptr) throw Error(ErrorKind::Internal, "UCX: a remote key needs a connected endpoint");
  ucp_rkey_h rkey = nullptr;
  const ucs_status_t status = ucp_ep_rkey_unpack(ep, key.data(), &rkey);
  if (status != UCS_OK) raise("unpacking a peer's remote key", status);
  return std::shared_ptr<RemoteKey>(new RemoteKey(rkey));
}

Engine::RemoteKey::~RemoteKey() { ucp_rkey_destroy(key_); }

std::shared_ptr<Request> Engine::writeThenSend(int endpoint, const Write& write, const Message& message) {
  auto request = makeRequest(message, endpoint, /*isReceive=*/false);
  // The key goes with the request: UCX reads it until the write is done.
  if (write.key) {
    request->keepalive_ = std::make_shared<std::pair<std::shared_ptr<const void>, std::shared_ptr<RemoteKey>>>(
        message.keepalive, write.key);
  }
  ucp_ep_h ep;
  {
    std::lock_guard<std::mutex> lock(endpointsMutex_);
    ep = endpoints_.at(size_t(endpoint))->ep;
    request->process_ = endpoints_[size_t(endpoint)]->process;
    if (endpoints_[size_t(endpoint)]->failed.load()) {
      request->settle(Request::Failed, ErrorKind::PeerFailure, "the connection to this peer failed earlier");
      return request;
    }
  }
  if (ep == nullptr || (write.bytes > 0 && !write.key)) {
    throw Error(ErrorKind::Internal, "UCX: a one-sided write needs a connected endpoint and the peer's key");
  }
  auto after = std::make_unique<AfterFlush>(AfterFlush{this, request, ep, message.data, message.bytes, message.tag,
                                                       std::make_shared<std::atomic<int>>(UCS_OK)});
  track(request);

  if (write.bytes > 0) {
    // The flush below completes after the write, and the request holds the memory till then; the write's
    // own callback only keeps its verdict for the flush's.
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.memory_type = UCS_MEMORY_TYPE_HOST;
    param.cb.send = writeCallback;
    auto* verdict = new std::shared_ptr<std::atomic<int>>(after->written);
    param.user_data = verdict;
    ucs_status_ptr_t handle = ucp_put_nbx(ep, write.data, write.bytes, write.remoteAddress, write.key->key_, &param);
    if (handle == nullptr || UCS_PTR_IS_ERR(handle)) delete verdict;  // no callback comes
    if (UCS_PTR_IS_ERR(handle)) {
      retire(*request, UCS_PTR_STATUS(handle), nullptr);
      return request;
    }
  }

  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = flushCallback;
  param.user_data = after.get();
  ucs_status_ptr_t handle = ucp_ep_flush_nbx(ep, &param);
  if (handle == nullptr || UCS_PTR_IS_ERR(handle)) {
    sendAfterFlush(*after, handle == nullptr ? UCS_OK : UCS_PTR_STATUS(handle));
  } else {
    after.release();  // the callback's
  }
  handOver(*request);
  return request;
}

void Engine::writeCallback(void* handle, ucs_status_t status, void* user) {
  std::unique_ptr<std::shared_ptr<std::atomic<int>>> verdict(static_cast<std::shared_ptr<std::atomic<int>>*>(user));
  (*verdict)->store(status);
  ucp_request_free(handle);
}

void Engine::flushCallback(void* handle, ucs_status_t status, void* user) {
  std::unique_ptr<AfterFlush> after(static_cast<AfterFlush*>(user));
  ucp_request_free(handle);
  after->engine->sendAfterFlush(*after, status);
}

void Engine::sendAfterFlush(const AfterFlush& after, ucs_status_t flushed) {
  // Runs inside UCX's progress when the flush completes there: UCX takes new operations from its
  // callbacks, and nothing here throws. A request that settled meanwhile (its deadline, an abort) only
  // leaves the outstanding list.
  const auto& request = after.request;
  const auto written = ucs_status_t(after.written->load());
  const ucs_status_t status = flushed != UCS_OK ? flushed : written != UCS_OK ? written : UCS_OK;
  if (status != UCS_OK || request->done()) {
    retire(*request, status != UCS_OK ? status : UCS_ERR_CANCELED, nullptr);
    return;
  }
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
  param.cb.send = sendCallback;
  param.user_data = request.get();
  param.memory_type = UCS_MEMORY_TYPE_HOST;
  adopt(request, ucp_tag_send_nbx(after.ep, after.data, after.bytes, after.tag, &param), nullptr);
  // Settled (reap, abort) between the look above and the send's handle being published: cancel it now.
  if (request->done()) cancel(*request);
}

}  // namespace hier::transport::ucx
