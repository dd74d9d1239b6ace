// Test helpers: ledger-loadtest's --json report, read strictly as its message, or a number read
// out of it without a JSON library.
#ifndef LEDGER_TESTS_E2E_LOADTEST_REPORT_H_
#define LEDGER_TESTS_E2E_LOADTEST_REPORT_H_

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "client/loadtest_report.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace ledger::testing_util {

// The number after the first `"key":` in the load test's JSON report, or -1. Its counts are
// int64, which protobuf's JSON mapping prints as strings ("key":"12"); doubles are bare.
inline long long JsonNumber(const std::string& json, const std::string& key) {
  size_t at = json.find("\"" + key + "\":");
  if (at == std::string::npos) return -1;
  at += key.size() + 3;
  if (at < json.size() && json[at] == '"') ++at;
  return std::atoll(json.c_str() + at);
}

// The report in `path`, read strictly: a key the message lacks fails the test.
inline loadtest::Report ReadLoadtestReport(const std::string& path) {
  std::ifstream file(path);
  const std::string json{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  loadtest::Report report;
  const auto parsed = google::protobuf::util::JsonStringToMessage(json, &report);
  EXPECT_TRUE(parsed.ok()) << parsed.ToString() << ": " << json;
  return report;
}

// Exact: every acknowledged operation is in the balances the load test read back, and every
// call (and transfer) whose outcome a fault left unknown was settled. `output` is the load
// test's, for the failure message.
inline void ExpectVerifiedExactly(const loadtest::Report& report, const std::string& output) {
  EXPECT_EQ(report.verification(), "PASS") << output;
  EXPECT_EQ(report.ambiguous().unresolved(), 0) << output;
  EXPECT_EQ(report.transfers().unresolved(), 0) << output;
}

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_E2E_LOADTEST_REPORT_H_
