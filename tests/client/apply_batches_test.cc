// ApplyInBatches, driven by a scripted server: batches in order, retries with the same
// operations, shed operations sent again, and where sending stops.
#include "client/apply_batches.h"

#include <chrono>
#include <deque>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ledger {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int32_t kOk = 0;
constexpr int32_t kShed = static_cast<int32_t>(grpc::StatusCode::RESOURCE_EXHAUSTED);

// Deposits of 1 to accounts "a0", "a1", ... with request ids "r0", "r1", ..., on lines 1, 2, ...
std::vector<ApplyInput> Deposits(int count) {
  std::vector<ApplyInput> inputs(count);
  for (int i = 0; i < count; ++i) {
    inputs[i].line = i + 1;
    v1::DepositRequest& deposit = *inputs[i].operation.mutable_deposit();
    deposit.set_account_id(absl::StrCat("a", i));
    deposit.set_amount(1);
    deposit.set_request_id(absl::StrCat("r", i));
  }
  return inputs;
}

// A scripted server: answers the calls from `script` in order (once it runs out, every
// operation OK with balance 1), and records what was sent, waited and noted.
class ScriptedServer {
 public:
  // Each operation of the call gets the code at its position in `codes` (OK past the end).
  static ApplyCallOutcome Answer(const std::vector<int32_t>& codes, size_t operations,
                                 std::optional<milliseconds> pushback = std::nullopt) {
    ApplyCallOutcome outcome{.pushback = pushback};
    for (size_t k = 0; k < operations; ++k) {
      v1::ApplyResult& result = *outcome.response.add_results();
      result.set_code(k < codes.size() ? codes[k] : kOk);
      if (result.code() == kOk) result.set_balance(1);
      if (result.code() != kOk) result.set_message("shard full; nothing was applied");
    }
    return outcome;
  }
  static ApplyCallOutcome Fail(grpc::StatusCode code,
                               std::optional<milliseconds> pushback = std::nullopt) {
    return {.status = grpc::Status(code, "call failed"), .pushback = pushback};
  }

  // Sets the answer of the next call; `codes` as for Answer, sized to the call's operations.
  std::deque<std::function<ApplyCallOutcome(size_t)>> script;
  std::vector<std::vector<std::string>> sent;  // The request ids of each call.
  std::vector<milliseconds> waits;
  std::vector<ApplyRetryNote> notes;
  std::vector<std::pair<size_t, ApplyOperationOutcome>> outcomes;

  ApplyBatchHooks Hooks() {
    return {
        .call =
            [this](const v1::ApplyRequest& request) {
              std::vector<std::string>& ids = sent.emplace_back();
              for (const v1::ApplyOperation& operation : request.operations()) {
                ids.push_back(operation.deposit().request_id());
              }
              if (script.empty()) return Answer({}, ids.size());
              auto next = std::move(script.front());
              script.pop_front();
              return next(ids.size());
            },
        .wait = [this](milliseconds wait) { waits.push_back(wait); },
        .note = [this](const ApplyRetryNote& note) { notes.push_back(note); },
        .outcome =
            [this](size_t index, const ApplyOperationOutcome& outcome) {
              outcomes.emplace_back(index, outcome);
            },
    };
  }

  std::vector<size_t> OutcomeIndices() const {
    std::vector<size_t> indices;
    for (const auto& [index, outcome] : outcomes) indices.push_back(index);
    return indices;
  }
};

TEST(ApplyInBatchesTest, SendsBatchesOfBatchSizeInOrderAndReportsEveryOperationInOrder) {
  ScriptedServer server;
  const int64_t calls = ApplyInBatches(Deposits(5), {.batch_size = 2}, server.Hooks());
  EXPECT_EQ(calls, 3);
  EXPECT_THAT(server.sent,
              ElementsAre(ElementsAre("r0", "r1"), ElementsAre("r2", "r3"), ElementsAre("r4")));
  EXPECT_THAT(server.OutcomeIndices(), ElementsAre(0, 1, 2, 3, 4));
  for (const auto& [index, outcome] : server.outcomes) {
    EXPECT_TRUE(outcome.sent);
    EXPECT_EQ(outcome.result.code(), kOk);
    EXPECT_EQ(outcome.result.balance(), 1);
  }
  EXPECT_TRUE(server.notes.empty());
}

TEST(ApplyInBatchesTest, ACallThatFailsUnavailableIsSentAgainWholeWithTheSameIds) {
  ScriptedServer server;
  server.script.push_back(
      [](size_t) { return ScriptedServer::Fail(grpc::StatusCode::UNAVAILABLE); });
  server.script.push_back(
      [](size_t) { return ScriptedServer::Fail(grpc::StatusCode::DEADLINE_EXCEEDED); });
  const int64_t calls = ApplyInBatches(Deposits(3), {.batch_size = 3}, server.Hooks());
  EXPECT_EQ(calls, 3);
  EXPECT_THAT(server.sent, ::testing::Each(ElementsAre("r0", "r1", "r2")));
  // No pushback: 100 ms, doubled.
  EXPECT_THAT(server.waits, ElementsAre(milliseconds(100), milliseconds(200)));
  ASSERT_EQ(server.notes.size(), 2u);
  EXPECT_FALSE(server.notes[0].shed);
  EXPECT_EQ(server.notes[0].text,
            "the Apply call for lines 1-3 (3 operations) failed: UNAVAILABLE: call failed; "
            "retrying in 100 ms (attempt 2 of 4)");
  EXPECT_EQ(server.notes[1].attempt, 3);
  EXPECT_EQ(server.notes[1].attempts, 4);
  for (const auto& [index, outcome] : server.outcomes) EXPECT_EQ(outcome.result.code(), kOk);
}

TEST(ApplyInBatchesTest, ShedOperationsAreSentAgainAloneAfterThePushbackAndTheirResultsMerged) {
  ScriptedServer server;
  server.script.push_back([](size_t n) {
    return ScriptedServer::Answer({kOk, kShed, kOk, kShed}, n, milliseconds(20));
  });
  const int64_t calls = ApplyInBatches(Deposits(4), {.batch_size = 4}, server.Hooks());
  EXPECT_EQ(calls, 2);
  EXPECT_THAT(server.sent,
              ElementsAre(ElementsAre("r0", "r1", "r2", "r3"), ElementsAre("r1", "r3")));
  EXPECT_THAT(server.waits, ElementsAre(milliseconds(20)));
  ASSERT_EQ(server.notes.size(), 1u);
  EXPECT_TRUE(server.notes[0].shed);
  EXPECT_EQ(server.notes[0].text,
            "2 operations of lines 2-4 shed by the server (RESOURCE_EXHAUSTED: nothing of them "
            "was applied); retrying them in 20 ms (attempt 2 of 4)");
  EXPECT_THAT(server.OutcomeIndices(), ElementsAre(0, 1, 2, 3));
  for (const auto& [index, outcome] : server.outcomes) EXPECT_EQ(outcome.result.code(), kOk);
}

TEST(ApplyInBatchesTest, WithoutAPushbackShedOperationsKeepTheirResultAndTheNextBatchGoes) {
  ScriptedServer server;
  server.script.push_back([](size_t n) { return ScriptedServer::Answer({kShed}, n); });
  const int64_t calls = ApplyInBatches(Deposits(3), {.batch_size = 2}, server.Hooks());
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(server.waits.empty());
  ASSERT_EQ(server.notes.size(), 1u);
  EXPECT_THAT(server.notes[0].text, HasSubstr("not retrying: the server sent no pushback"));
  ASSERT_EQ(server.outcomes.size(), 3u);
  EXPECT_EQ(server.outcomes[0].second.result.code(), kShed);
  EXPECT_EQ(server.outcomes[2].second.result.code(), kOk);
}

TEST(ApplyInBatchesTest, ShedOperationsAreSentAtMostRetriesMoreTimes) {
  ScriptedServer server;
  for (int i = 0; i < 10; ++i) {
    server.script.push_back(
        [](size_t n) { return ScriptedServer::Answer({kShed}, n, milliseconds(1)); });
  }
  const int64_t calls =
      ApplyInBatches(Deposits(2), {.batch_size = 2, .retries = 2}, server.Hooks());
  EXPECT_EQ(calls, 3);
  EXPECT_THAT(server.sent,
              ElementsAre(ElementsAre("r0", "r1"), ElementsAre("r0"), ElementsAre("r0")));
  EXPECT_THAT(server.notes.back().text, HasSubstr("not retrying: all 3 attempts were shed"));
  EXPECT_EQ(server.outcomes[0].second.result.code(), kShed);
  EXPECT_EQ(server.outcomes[1].second.result.code(), kOk);
}

TEST(ApplyInBatchesTest, APushbackLongerThanTheMaximumWaitIsNotWaitedFor) {
  ScriptedServer server;
  server.script.push_back(
      [](size_t n) { return ScriptedServer::Answer({kShed}, n, milliseconds(60000)); });
  ApplyInBatches(Deposits(1), {.batch_size = 1, .max_wait = milliseconds(5000)}, server.Hooks());
  EXPECT_TRUE(server.waits.empty());
  EXPECT_THAT(server.notes.back().text,
              HasSubstr("not retrying: the server asked to wait 60000 ms, longer than --deadline "
                        "(5000 ms)"));
}

TEST(ApplyInBatchesTest, ACallThatStillFailsStopsSendingAndTheRestIsReportedNotSent) {
  ScriptedServer server;
  for (int i = 0; i < 3; ++i) {
    server.script.push_back(
        [](size_t) { return ScriptedServer::Fail(grpc::StatusCode::DEADLINE_EXCEEDED); });
  }
  const int64_t calls =
      ApplyInBatches(Deposits(5), {.batch_size = 2, .retries = 2}, server.Hooks());
  EXPECT_EQ(calls, 3);  // The first batch, three times; nothing after it.
  EXPECT_THAT(server.OutcomeIndices(), ElementsAre(0, 1, 2, 3, 4));
  for (size_t i = 0; i < 5; ++i) {
    const ApplyOperationOutcome& outcome = server.outcomes[i].second;
    EXPECT_EQ(outcome.result.code(), static_cast<int32_t>(grpc::StatusCode::DEADLINE_EXCEEDED));
    EXPECT_EQ(outcome.sent, i < 2) << i;
  }
  EXPECT_THAT(server.outcomes[0].second.result.message(),
              HasSubstr("call failed; outcome unknown: it may have been applied"));
  EXPECT_EQ(server.outcomes[4].second.result.message(),
            "not sent: the Apply call for lines 1-2 failed (DEADLINE_EXCEEDED) and ledgerctl "
            "stopped there; nothing of it was applied");
  EXPECT_THAT(server.notes.back().text, HasSubstr("not retrying: all 3 attempts failed"));
}

TEST(ApplyInBatchesTest, ACallRefusedForAReasonARetryCannotChangeIsNotRetried) {
  ScriptedServer server;
  server.script.push_back(
      [](size_t) { return ScriptedServer::Fail(grpc::StatusCode::INVALID_ARGUMENT); });
  EXPECT_EQ(ApplyInBatches(Deposits(2), {.batch_size = 1}, server.Hooks()), 1);
  EXPECT_THAT(server.notes.back().text, HasSubstr("not retrying: a retry cannot help"));
  EXPECT_FALSE(server.outcomes[1].second.sent);
}

TEST(ApplyInBatchesTest, AResponseWithTheWrongNumberOfResultsStopsSending) {
  ScriptedServer server;
  server.script.push_back([](size_t) { return ScriptedServer::Answer({}, 1); });
  EXPECT_EQ(ApplyInBatches(Deposits(3), {.batch_size = 2}, server.Hooks()), 1);
  EXPECT_EQ(server.outcomes[0].second.result.code(),
            static_cast<int32_t>(grpc::StatusCode::INTERNAL));
  EXPECT_THAT(server.outcomes[0].second.result.message(),
              HasSubstr("the server answered 1 results for 2 operations"));
  EXPECT_FALSE(server.outcomes[2].second.sent);
}

}  // namespace
}  // namespace ledger
