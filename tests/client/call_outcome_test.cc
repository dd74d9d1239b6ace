#include "client/call_outcome.h"

#include <chrono>
#include <string>

#include "gtest/gtest.h"
#include "proto/error_details.h"

namespace ledger {
namespace {

// A status as ledgerd sends it: `words` for people, `reason` for machines.
grpc::Status FromLedgerd(grpc::StatusCode code, v1::ErrorReason reason,
                         const std::string& words = "words that decide nothing",
                         std::optional<std::chrono::milliseconds> delay = std::nullopt) {
  return {code, words,
          EncodeErrorDetails(
              static_cast<int>(code), words,
              ErrorDetails{
                  .reason = reason, .metadata = {{"account_id", "alice"}}, .retry_delay = delay})};
}

struct Row {
  grpc::StatusCode code;
  v1::ErrorReason reason;
  CallEffect effect;
  CallAdvice advice;
  bool overloaded;
};

TEST(ReadCallOutcomeTest, EveryReasonDecidesTheEffectAndTheAdvice) {
  using enum grpc::StatusCode;
  const Row rows[] = {
      {INVALID_ARGUMENT, v1::INVALID_ACCOUNT_ID, CallEffect::kNotApplied, CallAdvice::kDone, false},
      {NOT_FOUND, v1::ACCOUNT_NOT_FOUND, CallEffect::kNotApplied, CallAdvice::kDone, false},
      {FAILED_PRECONDITION, v1::INSUFFICIENT_FUNDS, CallEffect::kNotApplied, CallAdvice::kDone,
       false},
      {ALREADY_EXISTS, v1::REQUEST_ID_REUSED, CallEffect::kNotApplied, CallAdvice::kDone, false},
      {RESOURCE_EXHAUSTED, v1::MAILBOX_FULL, CallEffect::kNotApplied, CallAdvice::kRetryAfterDelay,
       true},
      {RESOURCE_EXHAUSTED, v1::IN_FLIGHT_LIMIT, CallEffect::kNotApplied,
       CallAdvice::kRetryAfterDelay, true},
      // Too large for the mailbox: the same call is refused again.
      {RESOURCE_EXHAUSTED, v1::PART_TOO_LARGE, CallEffect::kNotApplied, CallAdvice::kDone, false},
      {UNAVAILABLE, v1::SHUTTING_DOWN, CallEffect::kNotApplied, CallAdvice::kRetryAfterDelay,
       false},
      // A cluster's follower: the leader it names may take the same call.
      {UNAVAILABLE, v1::NOT_LEADER, CallEffect::kNotApplied, CallAdvice::kRetryAfterDelay, false},
      {UNAVAILABLE, v1::OUTCOME_UNKNOWN, CallEffect::kUnknown, CallAdvice::kRetrySameId, false},
      {UNAVAILABLE, v1::TRANSFER_PENDING, CallEffect::kPending, CallAdvice::kRetrySameId, false},
      {CANCELLED, v1::CALLER_GONE, CallEffect::kNotApplied, CallAdvice::kRetryAfterDelay, false},
      {INTERNAL, v1::INTERNAL_FAULT, CallEffect::kNotApplied, CallAdvice::kDone, false},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(v1::ErrorReason_Name(row.reason));
    const CallOutcome outcome = ReadCallOutcome(FromLedgerd(row.code, row.reason));
    EXPECT_TRUE(outcome.from_ledgerd);
    EXPECT_EQ(outcome.reason, row.reason);
    EXPECT_EQ(outcome.effect, row.effect);
    EXPECT_EQ(outcome.advice, row.advice);
    EXPECT_EQ(outcome.overloaded, row.overloaded);
  }
}

TEST(ReadCallOutcomeTest, TheWordsChangeNothing) {
  const CallOutcome unknown = ReadCallOutcome(
      FromLedgerd(grpc::StatusCode::UNAVAILABLE, v1::OUTCOME_UNKNOWN, "nothing was applied"));
  EXPECT_EQ(unknown.effect, CallEffect::kUnknown);
  const CallOutcome refused = ReadCallOutcome(FromLedgerd(
      grpc::StatusCode::UNAVAILABLE, v1::SHUTTING_DOWN, "outcome unknown; still pending"));
  EXPECT_EQ(refused.effect, CallEffect::kNotApplied);
}

TEST(ReadCallOutcomeTest, ReadsTheRetryDelayAndTheMetadata) {
  const CallOutcome outcome =
      ReadCallOutcome(FromLedgerd(grpc::StatusCode::RESOURCE_EXHAUSTED, v1::MAILBOX_FULL, "full",
                                  std::chrono::milliseconds(1250)));
  ASSERT_TRUE(outcome.retry_delay.has_value());
  EXPECT_EQ(outcome.retry_delay->count(), 1250);
  EXPECT_EQ(MetadataValue(outcome.metadata, "account_id"), "alice");
  EXPECT_EQ(MetadataValue(outcome.metadata, "absent"), "");
}

TEST(ReadCallOutcomeTest, WithoutLedgerdsDetailsOnlyAHandlersCodeIsARefusal) {
  using enum grpc::StatusCode;
  EXPECT_EQ(ReadCallOutcome(grpc::Status::OK).effect, CallEffect::kApplied);
  for (grpc::StatusCode code : {INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION,
                                OUT_OF_RANGE, UNIMPLEMENTED, UNAUTHENTICATED, PERMISSION_DENIED}) {
    const CallOutcome outcome = ReadCallOutcome(grpc::Status(code, "nothing was applied"));
    EXPECT_FALSE(outcome.from_ledgerd) << code;
    EXPECT_EQ(outcome.effect, CallEffect::kNotApplied) << code;
    EXPECT_EQ(outcome.advice, CallAdvice::kDone) << code;
  }
  // gRPC's own words for a lost call, or a proxy's: the operation may have been applied, even
  // when the words say otherwise.
  for (grpc::StatusCode code :
       {UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED, INTERNAL, UNKNOWN, RESOURCE_EXHAUSTED}) {
    const CallOutcome outcome = ReadCallOutcome(grpc::Status(code, "nothing was applied"));
    EXPECT_EQ(outcome.effect, CallEffect::kUnknown) << code;
    EXPECT_EQ(outcome.advice, CallAdvice::kRetrySameId) << code;
    EXPECT_FALSE(outcome.overloaded) << code;
  }
}

TEST(ReadCallOutcomeTest, AReasonOfANewerServerIsReadByItsCode) {
  // An ErrorInfo of ledger.v1 whose reason this build does not know.
  const std::string details = EncodeErrorDetails(
      14, "w",
      ErrorDetails{.reason = v1::ERROR_REASON_UNSPECIFIED, .metadata = {}, .retry_delay = {}});
  const CallOutcome outcome =
      ReadCallOutcome(grpc::Status(grpc::StatusCode::UNAVAILABLE, "w", details));
  EXPECT_TRUE(outcome.from_ledgerd);
  EXPECT_EQ(outcome.effect, CallEffect::kUnknown);
}

TEST(ServerAnsweredTest, ATransportFailureIsNotAnAnswerUnlessLedgerdSentIt) {
  EXPECT_TRUE(ServerAnswered(grpc::Status::OK));
  EXPECT_TRUE(ServerAnswered(grpc::Status(grpc::StatusCode::NOT_FOUND, "")));
  EXPECT_FALSE(ServerAnswered(grpc::Status(grpc::StatusCode::UNAVAILABLE, "still pending")));
  EXPECT_FALSE(ServerAnswered(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "")));
  EXPECT_TRUE(
      ServerAnswered(FromLedgerd(grpc::StatusCode::UNAVAILABLE, v1::TRANSFER_PENDING, "x")));
}

TEST(ReadApplyResultTest, AResultIsReadByItsReasonOrElseByTheContract) {
  v1::ApplyResult shed;
  shed.set_code(8);
  shed.set_reason(v1::MAILBOX_FULL);
  EXPECT_TRUE(ReadApplyResult(shed).overloaded);
  v1::ApplyResult too_large = shed;
  too_large.set_reason(v1::PART_TOO_LARGE);
  EXPECT_FALSE(ReadApplyResult(too_large).overloaded);
  EXPECT_EQ(ReadApplyResult(too_large).advice, CallAdvice::kDone);
  v1::ApplyResult ok;
  EXPECT_EQ(ReadApplyResult(ok).effect, CallEffect::kApplied);
  // From a server without reasons: only UNAVAILABLE may have applied it.
  v1::ApplyResult old_unavailable;
  old_unavailable.set_code(14);
  EXPECT_EQ(ReadApplyResult(old_unavailable).effect, CallEffect::kUnknown);
  v1::ApplyResult old_shed;
  old_shed.set_code(8);
  EXPECT_EQ(ReadApplyResult(old_shed).effect, CallEffect::kNotApplied);
  EXPECT_TRUE(ReadApplyResult(old_shed).overloaded);
}

}  // namespace
}  // namespace ledger
