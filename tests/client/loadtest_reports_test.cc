#include "client/loadtest_reports.h"

#include <string>

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
