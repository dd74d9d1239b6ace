// Test helper for end-to-end tests: how many ledger calls have reached a running ledgerd's
// shards, read from its /metrics, so that a test can wait for its calls to arrive before it
// signals the process instead of sleeping and hoping they did.
#ifndef LEDGER_TESTS_E2E_CALLS_AT_SHARDS_H_
#define LEDGER_TESTS_E2E_CALLS_AT_SHARDS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "tests/http_get.h"
#include "tests/metrics_text.h"

namespace ledger::testing_util {

// Calls of operation `op` ("deposit", "withdraw", "balance") that are queued in a mailbox
// (ledger_mailbox_depth) or already handled (ledger_handler_seconds_count), summed over
// `shards` shards; nullopt when the scrape fails.
//
// NOTE: a call that a shard is handling at the moment of the scrape is in neither series, so
// the calls that arrived are this many or up to one more per shard (with --max_batch=1; a
// larger batch takes more calls out of the mailbox at once). Only handlers much slower than a
// scrape (--debug_handler_delay) keep the two series from counting one call twice.
inline std::optional<int64_t> CallsAtShards(int metrics_port, int shards, const std::string& op) {
  const std::optional<HttpResponse> scrape = HttpGet(metrics_port, "/metrics");
  if (!scrape.has_value() || scrape->status != 200) return std::nullopt;
  int64_t calls = 0;
  for (int shard = 0; shard < shards; ++shard) {
    const std::string label = "shard=\"" + std::to_string(shard) + "\"";
    const std::optional<double> queued =
        SampleValue(scrape->body, "ledger_mailbox_depth{" + label + "}");
    const std::optional<double> handled =
        SampleValue(scrape->body, "ledger_handler_seconds_count{op=\"" + op + "\"," + label + "}");
    if (!queued.has_value() || !handled.has_value()) return std::nullopt;
    calls += static_cast<int64_t>(*queued) + static_cast<int64_t>(*handled);
  }
  return calls;
}

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_E2E_CALLS_AT_SHARDS_H_
