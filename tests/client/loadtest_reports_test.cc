#include "client/loadtest_reports.h"

#include <chrono>
#include <optional>
#include <string>

#include "client/loadtest_stats.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ledger {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Two seconds of 200 OK deposits and 50 refused withdrawals, verified.
RunOutcome TwoSecondsOfDepositsAndWithdrawals() {
  RunOutcome o;
  o.seconds = 2;
  o.stats.codes[0] = 200;  // OK
  o.stats.codes[9] = 50;   // FAILED_PRECONDITION
  o.stats.attempted = 250;
  o.stats.not_sent = 10;
  o.stats.ops[CallKindIndex(CallKind::kDeposit)].codes[0] = 200;
  o.stats.ops[CallKindIndex(CallKind::kWithdraw)].codes[9] = 50;
  o.verification = "PASS";
  o.checked.accounts_checked = 3;
  o.checked.balance_sum = 600;
  o.checked.acknowledged_net = 600;
  return o;
}

TEST(TextReportTest, SaysTheRatesCodesOperationsAndVerification) {
  const LoadtestOptions options;
  const std::string report = TextReport(options, TwoSecondsOfDepositsAndWithdrawals());
  // 260 calls (10 not sent) in 2 s; 250 of them sent.
  EXPECT_THAT(report,
              StartsWith("measured 2.0 s: 260 calls, 100 OK/s, 130 attempted/s, 125 sent/s\n"));
  EXPECT_THAT(report, HasSubstr("\ncodes: OK=200 FAILED_PRECONDITION=50 "
                                "NOT_SENT(in-flight cap)=10\n"));
  EXPECT_THAT(report,
              HasSubstr("\noperations: deposit 200 calls (200 OK) withdraw 50 calls (0 OK)\n"));
  EXPECT_THAT(report, EndsWith("verification: PASS (3 accounts; balances sum 600, acknowledged net "
                               "600, ambiguous +0/-0)\n"));
  EXPECT_THAT(report, ::testing::Not(HasSubstr("INTERRUPTED")));
}

TEST(TextReportTest, AnInterruptedWarmUpSaysNothingWasMeasuredAndWhyVerificationWasSkipped) {
  RunOutcome o;
  o.interrupted = "SIGINT";
  o.measurement_complete = false;
  o.verification_note = "interrupted; the report covers what was measured";
  const std::string report = TextReport(LoadtestOptions{}, o);
  EXPECT_THAT(report, StartsWith("INTERRUPTED by SIGINT: partial report, nothing measured (still "
                                 "warming up)\n"));
  EXPECT_THAT(report, EndsWith("verification: SKIPPED (interrupted; the report covers what was "
                               "measured)\n"));
}

TEST(ReportMessageTest, CarriesTheSameCountsAsTheText) {
  LoadtestOptions options;
  options.run_id = "run-x";
  const loadtest::Report report = ReportMessage(options, TwoSecondsOfDepositsAndWithdrawals());
  EXPECT_EQ(report.run_id(), "run-x");
  EXPECT_EQ(report.measured_calls(), 260);
  EXPECT_DOUBLE_EQ(report.ok_per_second(), 100);
  EXPECT_DOUBLE_EQ(report.attempted_per_second(), 130);
  EXPECT_DOUBLE_EQ(report.sent_per_second(), 125);
  EXPECT_EQ(report.not_sent(), 10);
  EXPECT_EQ(report.codes().at("OK"), 200);
  EXPECT_EQ(report.codes().at("FAILED_PRECONDITION"), 50);
  EXPECT_EQ(report.codes().size(), 2u);
  EXPECT_EQ(report.ops().at("deposit").calls(), 200);
  EXPECT_EQ(report.ops().at("withdraw").ok(), 0);
  EXPECT_EQ(report.ops().count("balance"), 0u);
  EXPECT_EQ(report.verification(), "PASS");
  EXPECT_EQ(report.batch(), 1);
}

TEST(StatsTest, ACallEndedNotLeaderCountsAsNotLeaderNotAsItsCode) {
  Stats stats(/*shards=*/0);
  stats.RecordCall(grpc::StatusCode::UNAVAILABLE, /*answered=*/true, std::chrono::milliseconds(1),
                   /*measured=*/true, /*not_leader=*/true);
  stats.RecordOperations({{CallKind::kDeposit, grpc::StatusCode::UNAVAILABLE, -1,
                           CallEffect::kNotApplied, /*not_leader=*/true}},
                         /*measured=*/true, std::chrono::milliseconds(1));
  stats.CountNotLeader(/*followed=*/true);
  stats.CountNotLeader(/*followed=*/false);
  const Stats::Snapshot s = stats.Take();
  EXPECT_EQ(s.attempted, 1u);
  EXPECT_EQ(s.codes[CodeIndex(grpc::StatusCode::UNAVAILABLE)], 0u);
  EXPECT_EQ(s.operation_codes[CodeIndex(grpc::StatusCode::UNAVAILABLE)], 0u);
  EXPECT_EQ(s.not_leader_calls, 1u);
  EXPECT_EQ(s.not_leader_operations, 1u);
  EXPECT_EQ(s.operations(), 1u);
  EXPECT_EQ(s.not_leader_refusals, 2u);
  EXPECT_EQ(s.not_leader_followed, 1u);
}

TEST(StatsTest, TheTimelineCountsOkOperationsBySecondFromItsStart) {
  Stats stats(/*shards=*/0);
  const auto start = std::chrono::steady_clock::now() - std::chrono::milliseconds(2500);
  stats.RecordOperations({{CallKind::kDeposit, grpc::StatusCode::OK}}, /*measured=*/false,
                         std::nullopt);  // Before the timeline: not in it.
  stats.StartTimeline(start);
  stats.RecordOperations({{CallKind::kDeposit, grpc::StatusCode::OK},
                          {CallKind::kDeposit, grpc::StatusCode::FAILED_PRECONDITION}},
                         /*measured=*/true, std::nullopt);
  const Stats::Snapshot s = stats.Take();
  ASSERT_EQ(s.ok_by_second.size(), 3u);  // Seconds 0 and 1 empty, the OK one in second 2.
  EXPECT_EQ(s.ok_by_second[0], 0u);
  EXPECT_EQ(s.ok_by_second[2], 1u);
  EXPECT_GE(s.longest_ok_gap, std::chrono::milliseconds(2500));
  EXPECT_EQ(s.longest_ok_gap_end, s.longest_ok_gap);  // It ended with that operation.
}

TEST(ReportMessageTest, CountsNotLeaderRefusalsOnTheirOwnAndTheTimeline) {
  RunOutcome o = TwoSecondsOfDepositsAndWithdrawals();
  o.stats.not_leader_refusals = 7;
  o.stats.not_leader_followed = 6;
  o.stats.not_leader_calls = 1;
  o.stats.not_leader_operations = 1;
  o.stats.attempted += 1;
  o.stats.ok_by_second = {120, 0, 80};
  o.stats.longest_ok_gap = std::chrono::milliseconds(1234);
  o.stats.longest_ok_gap_end = std::chrono::milliseconds(2100);
  o.leader_address = "127.0.0.1:3";
  const loadtest::Report report = ReportMessage(LoadtestOptions{}, o);
  EXPECT_EQ(report.codes().at("NOT_LEADER"), 1);
  EXPECT_EQ(report.codes().count("UNAVAILABLE"), 0u);
  EXPECT_EQ(report.operations().codes().at("NOT_LEADER"), 1);
  EXPECT_EQ(report.leader().refusals(), 7);
  EXPECT_EQ(report.leader().followed(), 6);
  EXPECT_EQ(report.leader().calls(), 1);
  EXPECT_EQ(report.leader().address(), "127.0.0.1:3");
  EXPECT_THAT(report.ok_by_second(), ::testing::ElementsAre(120, 0, 80));
  EXPECT_DOUBLE_EQ(report.longest_ok_gap_ms(), 1234);
  EXPECT_DOUBLE_EQ(report.longest_ok_gap_end_s(), 2.1);
  const std::string text = TextReport(LoadtestOptions{}, o);
  EXPECT_THAT(text, HasSubstr(" NOT_LEADER=1\n"));
  EXPECT_THAT(text, HasSubstr("NOT_LEADER: 7 refusals (nothing applied), 6 followed"));
  EXPECT_THAT(text, HasSubstr("longest time without an OK operation: 1234 ms, until 2.1 s"));
}

TEST(TextReportTest, SaysNothingOfLeadersWithoutRefusals) {
  const std::string text = TextReport(LoadtestOptions{}, TwoSecondsOfDepositsAndWithdrawals());
  EXPECT_THAT(text, ::testing::Not(HasSubstr("NOT_LEADER")));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("longest time")));
}

TEST(JsonReportTest, IsOneLineWithProtoFieldNamesAndZeroCounts) {
  const std::string json = JsonReport(LoadtestOptions{}, TwoSecondsOfDepositsAndWithdrawals());
  EXPECT_THAT(json, EndsWith("}\n"));
  EXPECT_EQ(json.find('\n'), json.size() - 1);
  EXPECT_THAT(json, HasSubstr("\"verification\":\"PASS\""));
  EXPECT_THAT(json, HasSubstr("\"measured_calls\":\"260\""));  // int64 as a string.
  EXPECT_THAT(json, HasSubstr("\"not_sent_late\":\"0\""));
}

}  // namespace
}  // namespace ledger
