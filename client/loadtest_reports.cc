#include "client/loadtest_reports.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/check.h"
#include "base/status_code_names.h"
#include "client/call_kind.h"
#include "client/latency_histogram.h"
#include "google/protobuf/util/json_util.h"

namespace ledger {
namespace {

// Rounded to a tenth, as the report has always printed them: finer would only be noise.
double Tenths(double value) { return std::round(value * 10) / 10; }

double Milliseconds(std::chrono::nanoseconds duration) {
  return static_cast<double>(duration.count()) / 1e6;
}

// The name under which the calls (and operations) that ended refused NOT_LEADER are counted,
// beside the status codes: their code, UNAVAILABLE, would read as an unknown outcome.
constexpr char kNotLeader[] = "NOT_LEADER";

void FillLatency(const LatencyHistogram& histogram, loadtest::Latency* latency) {
  auto us = [&](double q) {
    return Tenths(static_cast<double>(histogram.Percentile(q).count()) / 1e3);
  };
  latency->set_count(static_cast<int64_t>(histogram.count()));
  latency->set_p50(us(0.5));
  latency->set_p90(us(0.9));
  latency->set_p99(us(0.99));
  latency->set_p999(us(0.999));
  latency->set_max(Tenths(static_cast<double>(histogram.max().count()) / 1e3));
}

// Each non-zero count by its code's name.
void FillCodes(const std::array<uint64_t, kStatusCodeCount>& counts,
               google::protobuf::Map<std::string, int64_t>* codes) {
  for (size_t code = 0; code < kStatusCodeCount; ++code) {
    if (counts[code] > 0) (*codes)[kStatusCodeNames[code]] = static_cast<int64_t>(counts[code]);
  }
}

std::string LatencyLine(const char* label, const LatencyHistogram& histogram) {
  auto ms = [&](double q) { return static_cast<double>(histogram.Percentile(q).count()) / 1e6; };
  return absl::StrFormat(
      "%-20s p50 %8.3f  p90 %8.3f  p99 %8.3f  p99.9 %8.3f  max %8.3f ms  (%d calls)\n", label,
      ms(0.5), ms(0.9), ms(0.99), ms(0.999), static_cast<double>(histogram.max().count()) / 1e6,
      histogram.count());
}

// The operations with measured calls: a per-operation report only when there are two or more.
std::vector<CallKind> OpsCalled(const Stats::Snapshot& s) {
  std::vector<CallKind> called;
  for (CallKind op : kCallKinds) {
    if (s.op(op).calls() > 0) called.push_back(op);
  }
  return called;
}

// The measured transfers refused for good, by code (shed ones included: they applied nothing
// either).
std::array<uint64_t, kStatusCodeCount> TransferRefusals(const Stats::Snapshot& s) {
  std::array<uint64_t, kStatusCodeCount> refused{};
  const Stats::OpStats& transfers = s.op(CallKind::kTransfer);
  for (size_t code = 1; code < kStatusCodeCount; ++code) {
    refused[code] = transfers.not_applied_codes[code];
  }
  return refused;
}

// "FAILED_PRECONDITION=3 NOT_FOUND=1": the non-zero counts by code, in code order.
std::string CodeCounts(const std::array<uint64_t, kStatusCodeCount>& counts) {
  std::string out;
  for (size_t code = 0; code < kStatusCodeCount; ++code) {
    if (counts[code] == 0) continue;
    absl::StrAppend(&out, out.empty() ? "" : " ", kStatusCodeNames[code], "=", counts[code]);
  }
  return out;
}

// Operations are what the batches carry; unary calls are operations already.
const char* Unit(const LoadtestOptions& options) {
  return options.batch > 1 ? "operations" : "calls";
}

// Whether the run was interrupted, then its rates (and its batches').
void ReportThroughput(const LoadtestOptions& options, const RunOutcome& o,
                      std::ostringstream& report) {
  const Stats::Snapshot& s = o.stats;
  const double seconds = o.seconds > 0 ? o.seconds : 1;
  if (!o.interrupted.empty()) {
    report << "INTERRUPTED by " << o.interrupted << ": partial report, "
           << (o.measurement_complete ? "the measurement was complete"
               : o.seconds > 0        ? "measured until the signal"
                                      : "nothing measured (still warming up)")
           << "\n";
  }
  const uint64_t calls = s.attempted + s.not_sent + s.not_sent_late + s.not_sent_throttled;
  report << absl::StrFormat("measured %.1f s: %d calls, %.0f OK/s, %.0f attempted/s, %.0f sent/s",
                            o.seconds, calls, static_cast<double>(s.codes[0]) / seconds,
                            static_cast<double>(calls) / seconds,
                            static_cast<double>(s.attempted) / seconds);
  if (options.rate > 0) report << absl::StrFormat(" (offered %.0f/s)", options.rate);
  report << "\n";
  if (options.batch > 1) {
    report << absl::StrFormat(
        "batches of %d: %d operations, %.0f OK/s beside %.0f OK calls/s; by result: %s\n",
        options.batch, s.operations(), static_cast<double>(s.operation_codes[0]) / seconds,
        static_cast<double>(s.codes[0]) / seconds, CodeCounts(s.operation_codes));
  }
}

// The latency lines, the codes of the calls, and the operations by kind.
void ReportLatenciesAndCodes(const LoadtestOptions& options, const RunOutcome& o,
                             std::ostringstream& report) {
  const Stats::Snapshot& s = o.stats;
  const bool batched = options.batch > 1;
  report << LatencyLine("latency OK", s.ok) << LatencyLine("latency SHED", s.shed);
  const std::vector<CallKind> called = OpsCalled(s);
  if (called.size() > 1 && !batched) {  // An operation of a batch has no latency of its own.
    for (CallKind op : called) {
      report << LatencyLine(absl::StrCat("latency OK ", CallKindName(op)).c_str(), s.op(op).ok);
    }
  }
  // Only when some shed call was retried: otherwise it is the line above.
  if (s.shed_attempts.count() != s.shed.count()) {
    report << LatencyLine("latency SHED attempt", s.shed_attempts);
  }
  // Only when some OK call was retried: otherwise it is "latency OK".
  if (s.retry(Stats::RetryEvent::kOkAfterRetry) > 0) {
    report << LatencyLine("latency OK attempt", s.ok_attempts);
  }
  report << "codes:";
  for (size_t code = 0; code < kStatusCodeCount; ++code) {
    if (s.codes[code] > 0) report << " " << kStatusCodeNames[code] << "=" << s.codes[code];
  }
  if (s.not_sent > 0) report << " NOT_SENT(in-flight cap)=" << s.not_sent;
  if (s.not_sent_late > 0) report << " NOT_SENT(late)=" << s.not_sent_late;
  if (s.not_sent_throttled > 0) report << " NOT_SENT(throttled)=" << s.not_sent_throttled;
  if (s.not_leader_calls > 0) report << " " << kNotLeader << "=" << s.not_leader_calls;
  report << "\n";
  if (called.size() > 1) {
    report << "operations:";
    for (CallKind op : called) {
      report << absl::StrFormat(" %s %d %s (%d OK)", CallKindName(op), s.op(op).calls(),
                                Unit(options), s.op(op).codes[0]);
    }
    report << "\n";
  }
}

// Retries after pushback, the client's CPU, and the calls by shard.
void ReportRetriesAndShards(const LoadtestOptions& options, const RunOutcome& o,
                            std::ostringstream& report) {
  const Stats::Snapshot& s = o.stats;
  using RetryEvent = Stats::RetryEvent;
  if (std::any_of(s.retries.begin(), s.retries.end(), [](uint64_t n) { return n > 0; })) {
    report << absl::StrFormat(
        "retries after pushback: %d sent (%d calls OK after retrying); denied: %d by the "
        "budget, %d by the deadline, %d by --max_retries\n",
        s.retry(RetryEvent::kSent), s.retry(RetryEvent::kOkAfterRetry),
        s.retry(RetryEvent::kDeniedByBudget), s.retry(RetryEvent::kDeniedByDeadline),
        s.retry(RetryEvent::kDeniedByMaxRetries));
  }
  if (o.seconds > 0) {
    report << absl::StrFormat("client CPU: %.2f s over %.1f s (%.0f%% of one core)\n",
                              o.client_cpu_seconds, o.seconds,
                              100 * o.client_cpu_seconds / o.seconds);
  }
  for (size_t shard = 0; shard < s.shard_calls.size(); ++shard) {
    report << absl::StrFormat("shard %d: %d %s, %d shed\n", shard, s.shard_calls[shard],
                              Unit(options), s.shard_sheds[shard]);
  }
}

// The NOT_LEADER refusals and where calls went; the longest stretch without an OK operation.
void ReportLeader(const RunOutcome& o, std::ostringstream& report) {
  const Stats::Snapshot& s = o.stats;
  if (s.not_leader_refusals > 0) {
    report << absl::StrFormat(
        "NOT_LEADER: %d refusals (nothing applied), %d followed with the same request; %d calls "
        "ended refused; calls went to %s at the end\n",
        s.not_leader_refusals, s.not_leader_followed, s.not_leader_calls, o.leader_address);
  }
  // Only when it stands out (a failover, a restart): a healthy run answers every millisecond.
  if (s.longest_ok_gap >= std::chrono::seconds(1)) {
    report << absl::StrFormat("longest time without an OK operation: %.0f ms, until %.1f s\n",
                              Milliseconds(s.longest_ok_gap),
                              Milliseconds(s.longest_ok_gap_end) / 1000);
  }
}

// How the ambiguous calls and the transfers were settled.
void ReportSettlement(const LoadtestOptions& options, const RunOutcome& o,
                      std::ostringstream& report) {
  const Stats::Snapshot& s = o.stats;
  const Resolution& r = o.resolution;
  if (options.verify && r.calls > 0) {
    report << absl::StrFormat(
        "ambiguous %s: %d; settled by retrying with their request_id%s: %d applied, %d not "
        "applied; unresolved: %d\n",
        Unit(options), r.calls,
        r.transfers > 0 ? " (transfers: GetTransfer, or a same-id retry)" : "", r.applied,
        r.not_applied, r.unresolved);
  }
  if (s.op(CallKind::kTransfer).calls() > 0 || r.transfers > 0) {
    const std::string refusals = CodeCounts(TransferRefusals(s));
    report << absl::StrFormat(
        "transfers: %d OK, refused: %s; ambiguous %d (settled by GetTransfer or a same-id retry: "
        "%d committed, %d refused; unresolved %d)\n",
        s.op(CallKind::kTransfer).codes[0], refusals.empty() ? "none" : refusals, r.transfers,
        r.transfers_committed, r.transfers_refused, r.transfers_unresolved);
  }
  if (r.transfers_without_records > 0) {
    report << absl::StrFormat(
        "  %d ambiguous transfers left unsettled: the server keeps no transfer records "
        "(GetTransfer: FAILED_PRECONDITION, as with --durability=none), and a retry there is not "
        "deduplicated; their amounts widen the check\n",
        r.transfers_without_records);
  }
}

// The verification's line, then its mismatches.
void ReportVerification(const RunOutcome& o, std::ostringstream& report) {
  report << "verification: " << o.verification;
  if (o.verification == "PASS" || o.verification == "FAIL") {
    report << absl::StrFormat(
        " (%d accounts; balances sum %d, acknowledged net %d, ambiguous +%d/-%d%s)",
        o.checked.accounts_checked, o.checked.balance_sum, o.checked.acknowledged_net,
        o.checked.ambiguous_deposits, o.checked.ambiguous_withdrawals,
        o.checked.ambiguous_transfers > 0
            ? absl::StrCat(", transfers in doubt ", o.checked.ambiguous_transfers)
            : "");
  } else {
    report << " (" << o.verification_note << ")";
  }
  report << "\n";
  for (const std::string& mismatch : o.checked.mismatches) report << "  " << mismatch << "\n";
  if (o.watch.verdict.empty()) return;
  report << "watch: " << o.watch.verdict
         << absl::StrFormat(" (%d operations rebuilt to position %d, %d reconnects%s)",
                            o.watch.events, o.watch.last_position, o.watch.reconnects,
                            o.watch.note.empty() ? "" : absl::StrCat("; ", o.watch.note))
         << "\n";
}

}  // namespace

std::string TextReport(const LoadtestOptions& options, const RunOutcome& o) {
  std::ostringstream report;
  ReportThroughput(options, o, report);
  ReportLatenciesAndCodes(options, o, report);
  ReportRetriesAndShards(options, o, report);
  ReportLeader(o, report);
  ReportSettlement(options, o, report);
  ReportVerification(o, report);
  return report.str();
}

loadtest::Report ReportMessage(const LoadtestOptions& options, const RunOutcome& o) {
  const Stats::Snapshot& s = o.stats;
  const double seconds = o.seconds > 0 ? o.seconds : 1;
  const uint64_t calls = s.attempted + s.not_sent + s.not_sent_late + s.not_sent_throttled;
  const auto per_second = [&](uint64_t n) { return Tenths(static_cast<double>(n) / seconds); };
  loadtest::Report report;
  report.set_run_id(options.run_id);
  report.set_measured_seconds(std::round(o.seconds * 1000) / 1000);
  report.set_measured_calls(static_cast<int64_t>(calls));
  report.set_ok_per_second(per_second(s.codes[0]));
  report.set_attempted_per_second(per_second(calls));
  report.set_offered_per_second(Tenths(options.rate));
  report.set_sent_per_second(per_second(s.attempted));
  report.set_client_cpu_seconds(std::round(o.client_cpu_seconds * 1000) / 1000);
  report.set_interrupted(o.interrupted);
  FillCodes(s.codes, report.mutable_codes());
  report.set_not_sent(static_cast<int64_t>(s.not_sent));
  report.set_not_sent_late(static_cast<int64_t>(s.not_sent_late));
  report.set_not_sent_throttled(static_cast<int64_t>(s.not_sent_throttled));
  using RetryEvent = Stats::RetryEvent;
  loadtest::Retries* retries = report.mutable_retries();
  retries->set_sent(static_cast<int64_t>(s.retry(RetryEvent::kSent)));
  retries->set_denied_by_budget(static_cast<int64_t>(s.retry(RetryEvent::kDeniedByBudget)));
  retries->set_denied_by_deadline(static_cast<int64_t>(s.retry(RetryEvent::kDeniedByDeadline)));
  retries->set_denied_by_max_retries(
      static_cast<int64_t>(s.retry(RetryEvent::kDeniedByMaxRetries)));
  retries->set_ok_after_retry(static_cast<int64_t>(s.retry(RetryEvent::kOkAfterRetry)));
  loadtest::CallLatencies* latency = report.mutable_latency_us();
  FillLatency(s.ok, latency->mutable_ok());
  FillLatency(s.shed, latency->mutable_resource_exhausted());
  FillLatency(s.shed_attempts, latency->mutable_resource_exhausted_attempt());
  FillLatency(s.ok_attempts, latency->mutable_ok_attempt());
  for (size_t shard = 0; shard < s.shard_calls.size(); ++shard) {
    loadtest::ShardCount* count = report.add_shards();
    count->set_calls(static_cast<int64_t>(s.shard_calls[shard]));
    count->set_shed(static_cast<int64_t>(s.shard_sheds[shard]));
  }
  const Resolution& r = o.resolution;
  loadtest::Ambiguous* ambiguous = report.mutable_ambiguous();
  ambiguous->set_calls(r.calls);
  ambiguous->set_applied(r.applied);
  ambiguous->set_not_applied(r.not_applied);
  ambiguous->set_unresolved(r.unresolved);
  for (CallKind op : OpsCalled(s)) {
    loadtest::OperationKind& kind = (*report.mutable_ops())[std::string(CallKindName(op))];
    kind.set_calls(static_cast<int64_t>(s.op(op).calls()));
    kind.set_ok(static_cast<int64_t>(s.op(op).codes[0]));
    FillLatency(s.op(op).ok, kind.mutable_latency_us());
  }
  // ok and refused_by_code: measured calls, as "codes"; ambiguous and its settlement: the whole
  // run, warm-up included, as "ambiguous" (every call is verified).
  loadtest::Transfers* transfers = report.mutable_transfers();
  transfers->set_ok(static_cast<int64_t>(s.op(CallKind::kTransfer).codes[0]));
  FillCodes(TransferRefusals(s), transfers->mutable_refused_by_code());
  transfers->set_ambiguous(r.transfers);
  transfers->set_settled_committed(r.transfers_committed);
  transfers->set_settled_refused(r.transfers_refused);
  transfers->set_unresolved(r.transfers_unresolved);
  transfers->set_unresolved_without_records(r.transfers_without_records);
  transfers->set_in_doubt_amount(o.checked.ambiguous_transfers);
  report.set_verification(o.verification);
  if (!o.watch.verdict.empty()) {
    loadtest::WatchCheck* watch = report.mutable_watch();
    watch->set_verdict(o.watch.verdict);
    watch->set_note(o.watch.note);
    watch->set_events(o.watch.events);
    watch->set_reconnects(o.watch.reconnects);
    watch->set_last_position(o.watch.last_position);
  }
  report.set_batch(options.batch);
  report.set_calls_per_second(per_second(s.codes[0]));
  report.set_ops_per_second(per_second(s.operation_codes[0]));
  report.mutable_operations()->set_measured(static_cast<int64_t>(s.operations()));
  FillCodes(s.operation_codes, report.mutable_operations()->mutable_codes());
  if (s.not_leader_calls > 0) {
    (*report.mutable_codes())[kNotLeader] = static_cast<int64_t>(s.not_leader_calls);
  }
  if (s.not_leader_operations > 0) {
    (*report.mutable_operations()->mutable_codes())[kNotLeader] =
        static_cast<int64_t>(s.not_leader_operations);
  }
  loadtest::Leader* leader = report.mutable_leader();
  leader->set_refusals(static_cast<int64_t>(s.not_leader_refusals));
  leader->set_followed(static_cast<int64_t>(s.not_leader_followed));
  leader->set_calls(static_cast<int64_t>(s.not_leader_calls));
  leader->set_operations(static_cast<int64_t>(s.not_leader_operations));
  leader->set_address(o.leader_address);
  for (uint64_t ok : s.ok_by_second) report.add_ok_by_second(static_cast<int64_t>(ok));
  report.set_longest_ok_gap_ms(Tenths(Milliseconds(s.longest_ok_gap)));
  report.set_longest_ok_gap_end_s(Tenths(Milliseconds(s.longest_ok_gap_end) / 1000));
  return report;
}

std::string JsonReport(const LoadtestOptions& options, const RunOutcome& o) {
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  print.always_print_primitive_fields = true;
  std::string json;
  const auto printed =
      google::protobuf::util::MessageToJsonString(ReportMessage(options, o), &json, print);
  LEDGER_CHECK(printed.ok());  // Only a message with invalid UTF-8 strings could fail.
  return json + "\n";
}

}  // namespace ledger
