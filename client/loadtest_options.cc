#include "client/loadtest_options.h"

#include <algorithm>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/stable_hash.h"
#include "cli/host_port.h"
#include "client/batch_call.h"

namespace ledger {
namespace {

// --target (its addresses), the credentials, --mix and --transfer_scope: the options given as text.
absl::Status ParseOptionTexts(LoadtestOptions& o, absl::string_view mix_text,
                              absl::string_view scope_text) {
  o.targets.clear();
  for (absl::string_view text : absl::StrSplit(o.target, ',')) {
    absl::StatusOr<cli::HostPort> target =
        cli::ParseHostPort("--target", text, cli::AddressUse::kConnect, 50051);
    if (!target.ok()) return target.status();
    o.targets.push_back(target->ToString());
  }
  if (o.targets.size() > kTargetsMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("--target lists ", o.targets.size(), " addresses; at most ", kTargetsMax));
  }
  o.target = absl::StrJoin(o.targets, ",");
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      NewChannelCredentials(o.tls);
  if (!credentials.ok()) return credentials.status();
  o.credentials = *std::move(credentials);
  absl::StatusOr<OperationMix> mix = ParseOperationMix(mix_text);
  if (!mix.ok()) return mix.status();
  o.mix = *mix;
  absl::StatusOr<TransferScope> scope = ParseTransferScope(scope_text);
  if (!scope.ok()) return scope.status();
  o.transfer_scope = *scope;
  return absl::OkStatus();
}

// The bounds on how calls are sent: how many, how large, how fast, how retried.
absl::Status CheckSendingBounds(LoadtestOptions& o) {
  if (o.concurrency < 1) return absl::InvalidArgumentError("--concurrency must be at least 1");
  if (o.batch < 1 || static_cast<size_t>(o.batch) > kMaxBatchOperations) {
    return absl::InvalidArgumentError(
        absl::StrCat("--batch must be 1 to ", kMaxBatchOperations, " (the server's limit)"));
  }
  if (o.fund < 0) return absl::InvalidArgumentError("--fund must not be negative");
  if (o.rate < 0) return absl::InvalidArgumentError("--rate must not be negative");
  if (o.max_in_flight < 0) return absl::InvalidArgumentError("--max_in_flight must be >= 0");
  // Within one connection's worth of streams per channel: see the flag's help.
  if (o.max_in_flight == 0) {
    o.max_in_flight = static_cast<int32_t>(
        std::min<int64_t>(int64_t{kStreamsPerChannel} * std::max(o.channels, 1),
                          std::numeric_limits<int32_t>::max()));
  }
  if (o.max_send_delay <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--max_send_delay must be positive (inf: never late)");
  }
  if (o.max_retries < 0 || o.max_retries > kMaxRetriesLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_retries must be 0 to ", kMaxRetriesLimit));
  }
  if (!(o.retry_budget >= 0 && o.retry_budget <= 1)) {
    return absl::InvalidArgumentError("--retry_budget must be 0 to 1");
  }
  if (!(o.throttle_k >= 0 && o.throttle_k <= 1000)) {
    return absl::InvalidArgumentError("--throttle_k must be 0 (off) to 1000");
  }
  return absl::OkStatus();
}

// The bounds on the run: how long, over which accounts and amounts, and its end.
absl::Status CheckRunBounds(const LoadtestOptions& o) {
  if (o.duration <= absl::ZeroDuration() && o.requests <= 0) {
    return absl::InvalidArgumentError("give a positive --duration or --requests");
  }
  if (o.warmup < absl::ZeroDuration()) return absl::InvalidArgumentError("--warmup < 0");
  if (o.amount_min < 1 || o.amount_max < o.amount_min) {
    return absl::InvalidArgumentError("need 1 <= --amount_min <= --amount_max");
  }
  if (o.channels < 1) return absl::InvalidArgumentError("--channels must be at least 1");
  if (o.deadline <= absl::ZeroDuration()) return absl::InvalidArgumentError("--deadline <= 0");
  if (o.shards < 0 || o.shards > kServerShardsMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("--server_shards must be 0 to ", kServerShardsMax));
  }
  if (o.resolve_for < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--resolve_for must not be negative");
  }
  return absl::OkStatus();
}

bool IsAccountIdByte(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == ':' || c == '@' || c == '-';
}

}  // namespace

absl::StatusOr<LoadtestOptions> ValidateOptions(LoadtestOptions options, absl::string_view mix,
                                                absl::string_view transfer_scope) {
  if (absl::Status parsed = ParseOptionTexts(options, mix, transfer_scope); !parsed.ok()) {
    return parsed;
  }
  if (absl::Status sending = CheckSendingBounds(options); !sending.ok()) return sending;
  if (absl::Status run = CheckRunBounds(options); !run.ok()) return run;
  if (options.run_id.empty()) {
    options.run_id = absl::StrFormat("run%08x", std::random_device{}());
  }
  // The run id's bytes, and its length beside the number of accounts, as ledgerd checks ids.
  if (!IsValidAccountId(absl::StrCat(options.run_id, "-", options.accounts))) {
    return absl::InvalidArgumentError(
        "--run_id must be short and use only A-Z a-z 0-9 . _ : @ -, like account ids");
  }
  return options;
}

bool IsValidAccountId(absl::string_view account_id) {
  if (account_id.empty() || account_id.size() > kAccountIdMaxBytes) return false;
  return std::all_of(account_id.begin(), account_id.end(), IsAccountIdByte);
}

std::string AccountName(const std::string& run_id, int64_t index) {
  return absl::StrCat(run_id, "-acct-", index);
}

absl::StatusOr<TransferPartners> NewTransferPartners(const LoadtestOptions& options) {
  std::vector<int32_t> shard_of;
  if (options.shards > 0) {
    for (int64_t i = 0; i < options.accounts; ++i) {
      shard_of.push_back(ShardOf(AccountName(options.run_id, i), options.shards));
    }
  }
  return TransferPartners::Create(options.transfer_scope, static_cast<size_t>(options.accounts),
                                  std::move(shard_of));
}

}  // namespace ledger
