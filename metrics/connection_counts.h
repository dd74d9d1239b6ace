// Defines `ConnectionCounts`: what ledgerd's accept loop has done with the connections to its
// gRPC port (server/connection_acceptor.h), as /metrics reports it (ledger_connections*).
#ifndef LEDGER_METRICS_CONNECTION_COUNTS_H_
#define LEDGER_METRICS_CONNECTION_COUNTS_H_

#include <cstdint>

namespace ledger {

struct ConnectionCounts {
  // Client connections open, as of the accept loop's last look (at most a second old).
  int64_t open = 0;
  // --max_connections.
  int64_t max = 0;
  int64_t accepted = 0;
  // The idlest connections closed to stay within max.
  int64_t closed_at_limit = 0;
  // The idlest connections closed because accept() found no descriptor left.
  int64_t closed_out_of_descriptors = 0;
  // Times accept() failed for want of a descriptor (or of kernel memory).
  int64_t out_of_descriptors = 0;
};

}  // namespace ledger

#endif  // LEDGER_METRICS_CONNECTION_COUNTS_H_
