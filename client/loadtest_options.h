// Defines `LoadtestOptions`, everything ledger-loadtest is told by its flags as a plain struct,
// and `ValidateOptions`, which parses and checks them at start-up so that every bound is known
// before the first call; also the account names and transfer partners the options imply.
//
// Only main reads the flags (client/ledger_loadtest.cc); everything else takes these options.
#ifndef LEDGER_CLIENT_LOADTEST_OPTIONS_H_
#define LEDGER_CLIENT_LOADTEST_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/channel_credentials.h"
#include "client/workload.h"
#include "grpcpp/security/credentials.h"

namespace ledger {

// ledgerd's default --max_concurrent_streams: the calls one connection carries at once.
inline constexpr int32_t kStreamsPerChannel = 100;

// The most retries of one call that --max_retries accepts: more would only stretch a call that
// the server keeps refusing.
inline constexpr int32_t kMaxRetriesLimit = 10;

// The most --server_shards: ledgerd's own most --shards. The client keeps its own copy (it
// needs nothing of the server's code); a larger value could never equal the server's --shards.
inline constexpr int32_t kServerShardsMax = 1024;

// The most addresses --target may list: a cluster's members (three, or five), with room to spare.
inline constexpr size_t kTargetsMax = 16;

// The longest account id ledgerd accepts; the run id must leave room for "-acct-N" within it.
inline constexpr size_t kAccountIdMaxBytes = 128;

// The options of one run. Each field is its flag's (see the flags in ledger_loadtest.cc for
// their meaning), and defaults to the flag's default. Plain data; thread-compatible.
struct LoadtestOptions {
  // As given, then (ValidateOptions) each address in HOST:PORT form, joined by commas again.
  std::string target = "localhost:50051";
  // After ValidateOptions: --target's addresses in order, 1 to kTargetsMax of them.
  std::vector<std::string> targets;
  int32_t concurrency = 64;
  double rate = 0;
  int32_t max_in_flight = 0;  // After ValidateOptions: never 0.
  absl::Duration duration = absl::Seconds(10);
  int64_t requests = 0;
  absl::Duration warmup = absl::Seconds(2);
  int64_t accounts = 1000;
  std::string distribution = "uniform";
  OperationMix mix;  // From --mix, by ValidateOptions.
  int64_t amount_min = 1;
  int64_t amount_max = 1000;
  int32_t channels = 4;
  absl::Duration deadline = absl::Seconds(5);
  bool wait_for_ready = true;
  std::string run_id;  // After ValidateOptions: never empty.
  int32_t shards = 0;  // --server_shards.
  bool verify = true;
  bool watch = false;  // --watch: rebuild the balances from Watch and check them too.
  absl::Duration resolve_for = absl::Seconds(60);
  bool json = false;
  bool progress = false;
  std::string json_file;
  absl::Duration max_send_delay = absl::Milliseconds(2);
  int32_t max_retries = 2;
  double retry_budget = 0.1;
  double throttle_k = 1.1;
  bool adaptive_in_flight = true;
  TransferScope transfer_scope = TransferScope::kAny;  // From --transfer_scope.
  int32_t batch = 1;                                   // Operations per call; 1: unary calls.
  int64_t fund = 0;  // Setup: deposited into every account before the run; 0: no setup.
  ClientTlsOptions tls;
  // From NewChannelCredentials(tls), by ValidateOptions: plaintext or TLS.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
};

// Parses --target (one address, or a cluster's members separated by commas, each into HOST:PORT
// form), `mix` (--mix) and `transfer_scope` (--transfer_scope),
// makes the channel credentials, checks every bound, and fills the defaults that depend on other
// options (--max_in_flight 0, an empty --run_id). The first error found, in that order, says
// which flag is wrong and what it must be (INVALID_ARGUMENT for a bound; a parser's error else).
absl::StatusOr<LoadtestOptions> ValidateOptions(LoadtestOptions options, absl::string_view mix,
                                                absl::string_view transfer_scope);

// Whether `account_id` is 1 to kAccountIdMaxBytes bytes of [A-Za-z0-9._:@-], as ledgerd
// requires of an account id.
bool IsValidAccountId(absl::string_view account_id);

// The id of account `index` in this run: the run id keeps runs apart.
std::string AccountName(const std::string& run_id, int64_t index);

// Which accounts a transfer may pair (--transfer_scope), from the shard of each account's name
// as the server routes it (--server_shards). Only for a mix with transfers.
absl::StatusOr<TransferPartners> NewTransferPartners(const LoadtestOptions& options);

}  // namespace ledger

#endif  // LEDGER_CLIENT_LOADTEST_OPTIONS_H_
