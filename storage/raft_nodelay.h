// Defines `NodelayTransport`: libraft 0.15's TCP transport with Nagle's algorithm off.
//
// libraft 0.15's TCP transport never sets TCP_NODELAY (src/uv_tcp*.c). With more than one
// message in flight, a small AppendEntries then waits for the ACK of the previous one, which the
// peer delays by up to 40 ms: through RaftLog with four Appends in flight, commits fell to 212 a
// second with a p99 of 46 ms, against 1,592 and 4.5 ms with Nagle off (ledger-raft-log-bench,
// 2,000-byte entries, three replicas on loopback). So the transport's listen and connect are
// wrapped, and every connection they make turns Nagle off.
//
// Header only, C and libuv alone, so that bench/replication/shape_bench, a build of its own,
// uses the same code: after raft_uv_tcp_init(&n.transport, loop), call TurnNagleOff(n), and hand
// libraft &n.transport as usual.
#ifndef LEDGER_STORAGE_RAFT_NODELAY_H_
#define LEDGER_STORAGE_RAFT_NODELAY_H_

// libraft 0.15's headers lack extern "C" guards.
extern "C" {
#include <raft.h>
#include <raft/uv.h>
}
#include <uv.h>

#include <type_traits>

namespace ledger::storage {

// Standard layout with the transport first: libraft sees only that member, and the wrappers find
// the rest from it.
struct NodelayTransport {
  raft_uv_transport transport{};
  int (*tcp_listen)(raft_uv_transport*, raft_uv_accept_cb) = nullptr;
  int (*tcp_connect)(raft_uv_transport*, raft_uv_connect*, raft_id, const char*,
                     raft_uv_connect_cb) = nullptr;
  raft_uv_accept_cb accept = nullptr;
};
static_assert(std::is_standard_layout_v<NodelayTransport>);

namespace raft_nodelay_internal {

struct ConnectRequest {
  raft_uv_connect req{};  // First: what the TCP transport calls back with.
  raft_uv_connect* original = nullptr;
  raft_uv_connect_cb original_cb = nullptr;
};
static_assert(std::is_standard_layout_v<ConnectRequest>);

inline void NoDelay(uv_stream_s* stream) {
  if (stream != nullptr && stream->type == UV_TCP) {
    uv_tcp_nodelay(reinterpret_cast<uv_tcp_t*>(stream), 1);
  }
}

inline int Listen(raft_uv_transport* t, raft_uv_accept_cb accept) {
  auto* nodelay = reinterpret_cast<NodelayTransport*>(t);
  nodelay->accept = accept;
  return nodelay->tcp_listen(
      t, [](raft_uv_transport* t, raft_id id, const char* address, uv_stream_s* stream) {
        NoDelay(stream);
        reinterpret_cast<NodelayTransport*>(t)->accept(t, id, address, stream);
      });
}

inline int Connect(raft_uv_transport* t, raft_uv_connect* req, raft_id id, const char* address,
                   raft_uv_connect_cb cb) {
  auto* request = new ConnectRequest;
  request->original = req;
  request->original_cb = cb;
  const int rv = reinterpret_cast<NodelayTransport*>(t)->tcp_connect(
      t, &request->req, id, address, [](raft_uv_connect* r, uv_stream_s* stream, int status) {
        auto* request = reinterpret_cast<ConnectRequest*>(r);
        if (status == 0) NoDelay(stream);
        raft_uv_connect* original = request->original;
        const raft_uv_connect_cb original_cb = request->original_cb;
        delete request;
        original_cb(original, stream, status);
      });
  if (rv != 0) delete request;
  return rv;
}

}  // namespace raft_nodelay_internal

// After raft_uv_tcp_init on `n.transport`, before raft_uv_init.
inline void TurnNagleOff(NodelayTransport& n) {
  n.tcp_listen = n.transport.listen;
  n.tcp_connect = n.transport.connect;
  n.transport.listen = raft_nodelay_internal::Listen;
  n.transport.connect = raft_nodelay_internal::Connect;
}

}  // namespace ledger::storage

#endif  // LEDGER_STORAGE_RAFT_NODELAY_H_
