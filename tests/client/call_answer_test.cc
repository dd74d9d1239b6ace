#include "client/call_answer.h"

#include "gtest/gtest.h"

namespace ledger {
namespace {

TEST(ClassifyAnswerTest, OnlyUnavailableDeadlineAndCancelledDidNotComeFromTheServer) {
  for (int i = 0; i <= 16; ++i) {
    const auto code = static_cast<grpc::StatusCode>(i);
    const bool not_answered = code == grpc::StatusCode::UNAVAILABLE ||
                              code == grpc::StatusCode::DEADLINE_EXCEEDED ||
                              code == grpc::StatusCode::CANCELLED;
    EXPECT_EQ(ClassifyAnswer(code, "").server_answered, !not_answered) << i;
    EXPECT_EQ(ServerAnswered(code), !not_answered) << i;
  }
}

TEST(ClassifyAnswerTest, AStillPendingRetryIsTheServersAnswerWithAnUnknownEffect) {
  const CallAnswer pending = ClassifyAnswer(
      grpc::StatusCode::UNAVAILABLE, "transfer t-1 is still pending; it will end on its own");
  EXPECT_TRUE(pending.server_answered);
  EXPECT_EQ(pending.effect, Effect::kUnknown);
  EXPECT_FALSE(ClassifyAnswer(grpc::StatusCode::UNAVAILABLE, "failed to connect").server_answered);
}

TEST(ClassifyAnswerTest, EffectsFollowTheContract) {
  EXPECT_EQ(ClassifyAnswer(grpc::StatusCode::OK, "").effect, Effect::kApplied);
  for (grpc::StatusCode code :
       {grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::FAILED_PRECONDITION,
        grpc::StatusCode::OUT_OF_RANGE, grpc::StatusCode::NOT_FOUND,
        grpc::StatusCode::RESOURCE_EXHAUSTED, grpc::StatusCode::ALREADY_EXISTS,
        grpc::StatusCode::INTERNAL, grpc::StatusCode::UNIMPLEMENTED}) {
    EXPECT_EQ(ClassifyAnswer(code, "").effect, Effect::kNotApplied) << code;
  }
  for (grpc::StatusCode code :
       {grpc::StatusCode::DEADLINE_EXCEEDED, grpc::StatusCode::UNAVAILABLE,
        grpc::StatusCode::CANCELLED, grpc::StatusCode::UNKNOWN, grpc::StatusCode::ABORTED}) {
    EXPECT_EQ(ClassifyAnswer(code, "").effect, Effect::kUnknown) << code;
  }
}

}  // namespace
}  // namespace ledger
