#include "client/pushback.h"

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ledger {
namespace {

std::optional<std::chrono::milliseconds> PushbackOf(
    const std::vector<std::pair<std::string, std::string>>& entries) {
  std::multimap<grpc::string_ref, grpc::string_ref> metadata;
  for (const auto& [key, value] : entries) metadata.emplace(key, value);
  return RetryPushback(metadata);
}

TEST(RetryPushbackTest, ANonNegativeDecimalIsTheWait) {
  EXPECT_EQ(PushbackOf({{"grpc-retry-pushback-ms", "25"}}), std::chrono::milliseconds(25));
  EXPECT_EQ(PushbackOf({{"grpc-retry-pushback-ms", "0"}}), std::chrono::milliseconds(0));
  EXPECT_EQ(PushbackOf({{"grpc-retry-pushback-ms", "2000"}}), std::chrono::milliseconds(2000));
  EXPECT_EQ(PushbackOf({{"other", "x"}, {"grpc-retry-pushback-ms", "7"}}),
            std::chrono::milliseconds(7));
}

TEST(RetryPushbackTest, NoKeyMeansDoNotRetry) {
  EXPECT_EQ(PushbackOf({}), std::nullopt);
  EXPECT_EQ(PushbackOf({{"retry-pushback-ms", "25"}}), std::nullopt);
}

TEST(RetryPushbackTest, ANegativeOrMalformedValueMeansDoNotRetry) {
  for (const char* value :
       {"-1", "-25", "", " 25", "25 ", "+25", "25ms", "2.5", "0x10", "abc", "1000000000000"}) {
    EXPECT_EQ(PushbackOf({{"grpc-retry-pushback-ms", value}}), std::nullopt) << value;
  }
}

TEST(RetryPushbackTest, TheLongestAcceptedValueIsTwelveDigits) {
  EXPECT_EQ(PushbackOf({{"grpc-retry-pushback-ms", "999999999999"}}),
            std::chrono::milliseconds(999999999999));
}

}  // namespace
}  // namespace ledger
