// ReadApplyInput and AssignMissingIds: what `ledgerctl apply` accepts as input, and the ids it
// gives writes that have none.
#include "client/apply_input.h"

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<std::vector<ApplyInput>> Read(const std::string& text) {
  std::istringstream in(text);
  return ReadApplyInput(in);
}

TEST(ReadApplyInputTest, ReadsEveryKindOfOperationWithItsLineNumberAndSkipsBlankLines) {
  const auto inputs = Read(
      "{\"deposit\":{\"account_id\":\"alice\",\"amount\":\"100\",\"request_id\":\"imp-1\"}}\n"
      "\n"
      "   \t\r\n"
      "{\"withdraw\":{\"account_id\":\"alice\",\"amount\":7}}\r\n"
      "{\"balance\":{\"account_id\":\"alice\"}}\n"
      "{\"transfer\":{\"from_account_id\":\"alice\",\"to_account_id\":\"bob\",\"amount\":\"5\","
      "\"transfer_id\":\"t-1\"}}");  // The last line without "\n" counts.
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  ASSERT_EQ(inputs->size(), 4u);
  EXPECT_EQ((*inputs)[0].line, 1);
  EXPECT_EQ((*inputs)[0].operation.deposit().amount(), 100);
  EXPECT_EQ((*inputs)[0].operation.deposit().request_id(), "imp-1");
  EXPECT_EQ((*inputs)[1].line, 4);
  EXPECT_EQ((*inputs)[1].operation.withdraw().amount(), 7);
  EXPECT_EQ((*inputs)[2].line, 5);
  EXPECT_EQ((*inputs)[2].operation.balance().account_id(), "alice");
  EXPECT_EQ((*inputs)[3].line, 6);
  EXPECT_EQ((*inputs)[3].operation.transfer().transfer_id(), "t-1");
}

TEST(ReadApplyInputTest, AnEmptyInputHasNoOperations) {
  const auto inputs = Read("\n\n");
  ASSERT_TRUE(inputs.ok());
  EXPECT_TRUE(inputs->empty());
}

TEST(ReadApplyInputTest, EveryBadLineIsNamedWithWhatIsWrong) {
  const auto inputs = Read(
      "{\"deposit\":{\"account_id\":\"a\",\"amount\":\"1\"}}\n"
      "{\"deposit\":{\"account_id\":\"a\",\"amount\":\"1\"}\n"  // Line 2: not closed.
      "{\"depost\":{}}\n"                                       // Line 3: unknown field.
      "{}\n"                                                    // Line 4: no operation.
      "{\"deposit\":{\"amount\":\"1x\"}}\n"                     // Line 5: not an int64.
      "{\"deposit\":{},\"withdraw\":{}}\n"                      // Line 6: two operations.
      "[1]\n");                                                 // Line 7: not an object.
  ASSERT_EQ(inputs.status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<std::string> lines = absl::StrSplit(inputs.status().message(), '\n');
  ASSERT_EQ(lines.size(), 6u) << inputs.status();
  EXPECT_THAT(lines[0], ::testing::StartsWith("line 2: not a ledger.v1.ApplyOperation in JSON: "));
  EXPECT_EQ(lines[1], "line 3: not a ledger.v1.ApplyOperation in JSON: depost: Cannot find field.");
  EXPECT_THAT(lines[2], ::testing::StartsWith("line 4: sets no operation: it needs one of deposit, "
                                              "withdraw, balance or transfer"));
  EXPECT_THAT(lines[3], ::testing::StartsWith("line 5: "));
  EXPECT_THAT(lines[3], HasSubstr("1x"));
  EXPECT_THAT(lines[4], ::testing::StartsWith("line 6: "));
  EXPECT_THAT(lines[4], HasSubstr("oneof"));
  EXPECT_EQ(lines[5],
            "line 7: not a ledger.v1.ApplyOperation in JSON: Root element must be a message.");
}

TEST(ReadApplyInputTest, ListsTheFirstTenBadLinesAndCountsTheRest) {
  std::string text;
  for (int i = 0; i < 13; ++i) text += "nope\n";
  const auto inputs = Read(text);
  ASSERT_FALSE(inputs.ok());
  const std::vector<std::string> lines = absl::StrSplit(inputs.status().message(), '\n');
  ASSERT_EQ(lines.size(), 11u);
  EXPECT_THAT(lines[9], ::testing::StartsWith("line 10: "));
  EXPECT_EQ(lines[10], "and 3 more bad lines");
}

TEST(ReadApplyInputTest, ALineLongerThanTheLimitIsRefusedWithoutBeingKept) {
  const std::string operation = "{\"balance\":{\"account_id\":\"a\"}}";
  // Exactly the limit (JSON allows the trailing spaces), then "\n".
  const std::string at_limit =
      operation + std::string(kMaxApplyInputLineBytes - operation.size(), ' ');
  ASSERT_EQ(at_limit.size(), kMaxApplyInputLineBytes);
  EXPECT_TRUE(Read(at_limit + "\n").ok());
  const auto over = Read(at_limit + " \n{\"balance\":{\"account_id\":\"b\"}}\n");
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().message(), "line 1: longer than 65536 bytes, so not one operation");
}

TEST(AssignMissingIdsTest, GivesAnIdToEveryWriteWithoutOneAndKeepsTheOthers) {
  auto inputs = Read(
      "{\"deposit\":{\"account_id\":\"a\",\"amount\":\"1\"}}\n"
      "{\"deposit\":{\"account_id\":\"a\",\"amount\":\"1\",\"request_id\":\"mine\"}}\n"
      "{\"withdraw\":{\"account_id\":\"a\",\"amount\":\"1\"}}\n"
      "{\"balance\":{\"account_id\":\"a\"}}\n"
      "{\"transfer\":{\"from_account_id\":\"a\",\"to_account_id\":\"b\",\"amount\":\"1\"}}\n");
  ASSERT_TRUE(inputs.ok());
  int next = 0;
  EXPECT_EQ(AssignMissingIds(*inputs, [&] { return absl::StrCat("id-", ++next); }), 3u);
  std::vector<std::string> ids;
  for (const ApplyInput& input : *inputs) ids.push_back(IdOf(input.operation));
  EXPECT_THAT(ids, ::testing::ElementsAre("id-1", "mine", "id-2", "", "id-3"));
}

}  // namespace
}  // namespace ledger
