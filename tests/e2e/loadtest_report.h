// Test helper: reads numbers out of ledger-loadtest's --json report without a JSON library.
#ifndef LEDGER_TESTS_E2E_LOADTEST_REPORT_H_
#define LEDGER_TESTS_E2E_LOADTEST_REPORT_H_

#include <cstdlib>
#include <string>

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

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_E2E_LOADTEST_REPORT_H_
