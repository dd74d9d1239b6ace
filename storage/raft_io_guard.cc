#include "storage/raft_io_guard.h"

#include <cstdint>
#include <cstdio>
#include <type_traits>
#include <utility>

namespace ledger::storage {
namespace {

using State = RaftIoGuard::State;
using Held = RaftIoGuard::State::Held;

State& StateOf(raft_io* io) { return *reinterpret_cast<RaftIoGuard*>(io)->state; }

// Standard layout with libraft's request first: the I/O calls back with it.
struct AppendRequest {
  raft_io_append req{};
  raft_io_append* original = nullptr;
  raft_io_append_cb cb = nullptr;
  raft_io* io = nullptr;
  uint64_t number = 0;
};
static_assert(std::is_standard_layout_v<AppendRequest>);

struct SnapshotPutRequest {
  raft_io_snapshot_put req{};
  raft_io_snapshot_put* original = nullptr;
  raft_io_snapshot_put_cb cb = nullptr;
  raft_io* io = nullptr;
};
static_assert(std::is_standard_layout_v<SnapshotPutRequest>);

struct SendRequest {
  raft_io_send req{};
  raft_io_send* original = nullptr;
  raft_io_send_cb cb = nullptr;
  raft_io* io = nullptr;
  raft_id peer = 0;
  int64_t bytes = 0;
};
static_assert(std::is_standard_layout_v<SendRequest>);

// The payload a message carries: its entries, or its snapshot.
int64_t PayloadBytes(const raft_message& message) {
  int64_t bytes = 0;
  if (message.type == RAFT_IO_APPEND_ENTRIES) {
    for (unsigned i = 0; i < message.append_entries.n_entries; ++i) {
      bytes += static_cast<int64_t>(message.append_entries.entries[i].buf.len);
    }
  } else if (message.type == RAFT_IO_INSTALL_SNAPSHOT) {
    bytes = static_cast<int64_t>(message.install_snapshot.data.len);
  }
  return bytes;
}

int Send(raft_io* io, raft_io_send* req, const raft_message* message, raft_io_send_cb cb) {
  State& s = StateOf(io);
  State::Queued& queued = s.queued[message->server_id];
  if (queued.messages >= s.max_queued_messages || queued.bytes >= s.max_queued_bytes) {
    ++s.sends_refused;
    std::snprintf(io->errmsg, sizeof io->errmsg,
                  "refused: %lld messages (%lld bytes of entries) already queued for server %llu",
                  static_cast<long long>(queued.messages), static_cast<long long>(queued.bytes),
                  static_cast<unsigned long long>(message->server_id));
    return RAFT_NOCONNECTION;
  }
  auto* request = new SendRequest{{}, req, cb, io, message->server_id, PayloadBytes(*message)};
  queued.bytes += request->bytes;
  ++queued.messages;
  const int rv = s.send(io, &request->req, message, [](raft_io_send* done, int status) {
    auto* request = reinterpret_cast<SendRequest*>(done);
    State::Queued& queued = StateOf(request->io).queued[request->peer];
    queued.bytes -= request->bytes;
    --queued.messages;
    raft_io_send* original = request->original;
    const raft_io_send_cb original_cb = request->cb;
    delete request;
    original_cb(original, status);
  });
  if (rv != 0) {
    queued.bytes -= request->bytes;
    --queued.messages;
    delete request;
  }
  return rv;
}

int Refuse(raft_io* io) {
  std::snprintf(io->errmsg, sizeof io->errmsg,
                "refused: an earlier write of this log failed; the replica must restart");
  return RAFT_IOERR;
}

void WriteFailed(raft_io* io, int code) {
  State& s = StateOf(io);
  if (s.write_failed) return;
  s.write_failed = true;
  if (s.on_write_failed) s.on_write_failed(code);
}

// Sends what was held, in order, until the first that must still wait. Never from inside an
// I/O callback (RaftIoGuard::SendHeld says why).
void Release(raft_io* io) {
  State& s = StateOf(io);
  while (!s.held.empty() && !s.closing) {
    const Held::Kind kind = s.held.front().kind;
    if (kind == Held::kTruncate && s.snapshot_in_flight) return;
    if (kind == Held::kSnapshotPut && (s.truncating || s.snapshot_in_flight)) return;
    Held next = std::move(s.held.front());
    s.held.pop_front();
    next.send(0);
  }
}

int SendAppend(raft_io* io, raft_io_append* req, const raft_entry entries[], unsigned n,
               raft_io_append_cb cb) {
  State& s = StateOf(io);
  auto* request = new AppendRequest{{}, req, cb, io, ++s.sent};
  const int rv = s.append(io, &request->req, entries, n, [](raft_io_append* done, int status) {
    auto* request = reinterpret_cast<AppendRequest*>(done);
    raft_io* io = request->io;
    State& s = StateOf(io);
    if (status != 0 && status != RAFT_CANCELED) WriteFailed(io, status);
    // Sent after the truncation, so held behind its barrier: the truncation is done.
    if (s.truncating && request->number > s.truncation_sent) s.truncating = false;
    raft_io_append* original = request->original;
    const raft_io_append_cb original_cb = request->cb;
    delete request;
    original_cb(original, status);
  });
  if (rv != 0) delete request;
  return rv;
}

int SendTruncate(raft_io* io, raft_index index) {
  State& s = StateOf(io);
  const int rv = s.truncate(io, index);
  if (rv == 0) {
    s.truncating = true;
    s.truncation_sent = ++s.sent;
  }
  return rv;
}

int SendSnapshotPut(raft_io* io, unsigned trailing, raft_io_snapshot_put* req,
                    const raft_snapshot* snapshot, raft_io_snapshot_put_cb cb) {
  State& s = StateOf(io);
  auto* request = new SnapshotPutRequest{{}, req, cb, io};
  s.snapshot_in_flight = true;
  ++s.sent;
  const int rv = s.snapshot_put(io, trailing, &request->req, snapshot,
                                [](raft_io_snapshot_put* done, int status) {
                                  auto* request = reinterpret_cast<SnapshotPutRequest*>(done);
                                  raft_io* io = request->io;
                                  StateOf(io).snapshot_in_flight = false;
                                  raft_io_snapshot_put* original = request->original;
                                  const raft_io_snapshot_put_cb original_cb = request->cb;
                                  delete request;
                                  original_cb(original, status);
                                });
  if (rv != 0) {
    s.snapshot_in_flight = false;
    delete request;
  }
  return rv;
}

int Append(raft_io* io, raft_io_append* req, const raft_entry entries[], unsigned n,
           raft_io_append_cb cb) {
  State& s = StateOf(io);
  if (s.write_failed) return Refuse(io);
  if (s.held.empty()) return SendAppend(io, req, entries, n, cb);
  // Behind a held truncation: written after it, as libraft asked. libraft keeps the entries
  // until the callback.
  s.held.push_back({Held::kAppend, [io, req, entries, n, cb](int refusal) {
                      const int rv = refusal != 0 ? refusal : SendAppend(io, req, entries, n, cb);
                      if (rv == 0) return;
                      if (refusal == 0) WriteFailed(io, rv);
                      cb(req, rv);
                    }});
  return 0;
}

int Truncate(raft_io* io, raft_index index) {
  State& s = StateOf(io);
  if (s.write_failed) return Refuse(io);
  if (!s.snapshot_in_flight && s.held.empty()) return SendTruncate(io, index);
  s.held.push_back({Held::kTruncate, [io, index](int refusal) {
                      if (refusal != 0) return;
                      if (const int rv = SendTruncate(io, index); rv != 0) WriteFailed(io, rv);
                    }});
  return 0;
}

int SnapshotPut(raft_io* io, unsigned trailing, raft_io_snapshot_put* req,
                const raft_snapshot* snapshot, raft_io_snapshot_put_cb cb) {
  State& s = StateOf(io);
  if (!s.truncating && !s.snapshot_in_flight && s.held.empty()) {
    return SendSnapshotPut(io, trailing, req, snapshot, cb);
  }
  // libraft keeps the snapshot until the callback.
  s.held.push_back({Held::kSnapshotPut, [io, trailing, req, snapshot, cb](int refusal) {
                      const int rv =
                          refusal != 0 ? refusal : SendSnapshotPut(io, trailing, req, snapshot, cb);
                      if (rv != 0) cb(req, rv);
                    }});
  return 0;
}

// What is still held is cancelled, as the I/O cancels what it holds when it closes.
void Close(raft_io* io, raft_io_close_cb cb) {
  State& s = StateOf(io);
  s.closing = true;
  std::deque<Held> held;
  held.swap(s.held);
  for (Held& request : held) request.send(RAFT_CANCELED);
  s.close(io, cb);
}

}  // namespace

void RaftIoGuard::SendHeld() { Release(&io); }

void RaftIoGuard::Install(std::function<void(int code)> on_write_failed) {
  state->append = io.append;
  state->truncate = io.truncate;
  state->snapshot_put = io.snapshot_put;
  state->close = io.close;
  state->send = io.send;
  state->on_write_failed = std::move(on_write_failed);
  io.append = Append;
  io.truncate = Truncate;
  io.snapshot_put = SnapshotPut;
  io.close = Close;
  io.send = Send;
}

}  // namespace ledger::storage
