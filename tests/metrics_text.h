// Test helper: reads one sample out of a Prometheus text exposition.
#ifndef LEDGER_TESTS_METRICS_TEXT_H_
#define LEDGER_TESTS_METRICS_TEXT_H_

#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>

namespace ledger::testing_util {

// The value of the sample whose name and labels are exactly `series` (for example
// `ledger_accounts{shard="0"}`), or nullopt when the exposition has no such line.
inline std::optional<double> SampleValue(const std::string& exposition, const std::string& series) {
  std::istringstream lines(exposition);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 &&
        line[series.size()] == ' ') {
      return std::strtod(line.c_str() + series.size() + 1, nullptr);
    }
  }
  return std::nullopt;
}

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_METRICS_TEXT_H_
