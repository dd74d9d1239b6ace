// Defines `OpenConnections`: the client connections that ledgerd's accept loop has handed to
// gRPC, and how the loop closes the idlest of them when it must make room.
//
// Why: once gRPC has a connection's descriptor it owns it, and closes it when the connection
// ends without telling anyone. To bound the connections (each one a descriptor) ledgerd must know
// which are still open, and which are worth the least. Each is kept as (descriptor, socket
// inode): the descriptor is still that connection while fstat() reports the same inode. The
// kernel says how idle each one is (TCP_INFO): first come the connections that have never sent a
// byte (every gRPC client sends the HTTP/2 preface at once), oldest first, then the others by the
// time since they last sent anything. A connection is ended with shutdown(SHUT_RDWR), never
// close(): the descriptor stays gRPC's, which reads the end of the stream, fails what was on the
// connection and closes the descriptor itself.
//
// The one race left: between the inode check and shutdown() (microseconds), gRPC could close the
// connection and another thread open a socket that gets the same descriptor. Only the accept loop
// opens gRPC connections, so that socket could only be a /metrics connection or a storage file
// (which shutdown() refuses).
#ifndef LEDGER_SERVER_OPEN_CONNECTIONS_H_
#define LEDGER_SERVER_OPEN_CONNECTIONS_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace ledger {

// What the kernel says about one connection, for choosing which to close.
struct ConnectionActivity {
  int fd = -1;
  // Whether the client has sent any byte on it.
  bool spoke = false;
  // Milliseconds since the client last sent data (since the connection was set up, when it
  // never did).
  int64_t idle_ms = 0;
};

// The descriptors of the `count` connections to close first: those that never spoke, idlest
// (oldest) first, then the others, idlest first. Fewer when there are fewer. Pure; for tests.
std::vector<int> ChooseIdlest(std::vector<ConnectionActivity> connections, size_t count);

// Not thread-safe: one owner (the accept loop's thread).
class OpenConnections {
 public:
  // Records `fd`, a connection just accepted, before gRPC has it. A descriptor recorded before
  // (its connection since closed, the number reused) is replaced.
  void Add(int fd);
  // Forgets the connections gRPC has closed since; returns how many are still open.
  size_t Prune();
  // Connections recorded, including those closed since the last Prune.
  size_t size() const { return inodes_.size(); }
  // Forgets the connections gRPC has closed; then, when at least `open_at_least` are still open,
  // ends the `count` idlest (see ChooseIdlest) and forgets them. Returns how many it ended. One
  // pass over the connections.
  size_t CloseIdlest(size_t count, size_t open_at_least = 0);
  // Ends every connection still open whose client has never sent a byte (it has no call on it)
  // and forgets it; returns how many it ended.
  size_t CloseSilent();

 private:
  // Whether `fd` still refers to the socket whose inode is `inode`.
  static bool StillOpen(int fd, ino_t inode);
  // What TCP_INFO says of every connection still open; forgets the others.
  std::vector<ConnectionActivity> ActivityOfOpen();
  // Ends each of `fds` that is still the connection recorded, and forgets them all; how many
  // it ended.
  size_t Close(const std::vector<int>& fds);

  absl::flat_hash_map<int, ino_t> inodes_;
};

}  // namespace ledger

#endif  // LEDGER_SERVER_OPEN_CONNECTIONS_H_
