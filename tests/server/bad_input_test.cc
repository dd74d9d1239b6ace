// Bad input from clients: every malformed request gets the right code and changes nothing.
#include <condition_variable>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "tests/server/test_server.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;
using testing_util::Balance;
using testing_util::CallResult;
using testing_util::ContextWithDeadline;
using testing_util::Deposit;
using testing_util::TestServer;
using testing_util::Withdraw;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

class BadInputTest : public testing::Test {
 protected:
  void SetUp() override {
    stub_ = server_.NewStub();
    ASSERT_TRUE(Deposit(*stub_, "victim", 1000).status.ok());
  }
  void ExpectVictimUnchanged() { EXPECT_EQ(Balance(*stub_, "victim").balance, 1000); }

  TestServer server_;
  std::unique_ptr<v1::Ledger::Stub> stub_;
};

TEST_F(BadInputTest, MalformedAccountIdsAreInvalidArgumentForEveryMethod) {
  const std::vector<std::string> bad_ids = {"",
                                            std::string(129, 'a'),
                                            "caf\xC3\xA9",
                                            "tab\there",
                                            std::string("nul\0x", 5),
                                            "new\nline",
                                            "sp ace",
                                            "slash/",
                                            "\x7F"};
  for (const std::string& id : bad_ids) {
    for (const CallResult& result :
         {Deposit(*stub_, id, 10), Withdraw(*stub_, id, 10), Balance(*stub_, id)}) {
      EXPECT_EQ(result.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << id;
      EXPECT_THAT(result.status.error_message(),
                  HasSubstr("account_id must be 1 to 128 bytes of A-Z a-z 0-9 . _ : @ -"));
    }
  }
  ExpectVictimUnchanged();
}

TEST_F(BadInputTest, AccountIdMessagesSayWhatIsWrong) {
  EXPECT_THAT(Deposit(*stub_, "", 1).status.error_message(), HasSubstr("got an empty id"));
  EXPECT_THAT(Deposit(*stub_, std::string(129, 'a'), 1).status.error_message(),
              HasSubstr("got 129 bytes"));
  EXPECT_THAT(Deposit(*stub_, "sp ace", 1).status.error_message(),
              HasSubstr("byte 2 is 0x20, which is not allowed"));
}

TEST_F(BadInputTest, LongestValidAccountIdIsAccepted) {
  const std::string longest(128, 'z');
  EXPECT_EQ(Deposit(*stub_, longest, 7).balance, 7);
  EXPECT_EQ(Balance(*stub_, longest).balance, 7);
}

TEST_F(BadInputTest, NonPositiveAmountsAreInvalidArgument) {
  for (int64_t amount : {int64_t{0}, int64_t{-1}, std::numeric_limits<int64_t>::min()}) {
    CallResult deposit = Deposit(*stub_, "victim", amount);
    EXPECT_EQ(deposit.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << amount;
    EXPECT_EQ(
        deposit.status.error_message(),
        "amount must be greater than 0 (minor units, e.g. cents); got " + std::to_string(amount));
    EXPECT_EQ(Withdraw(*stub_, "victim", amount).status.error_code(),
              grpc::StatusCode::INVALID_ARGUMENT)
        << amount;
  }
  ExpectVictimUnchanged();
}

TEST_F(BadInputTest, MaxAmountTwiceOverflowsOnTheSecondDeposit) {
  ASSERT_TRUE(Deposit(*stub_, "max", kMax).status.ok());
  EXPECT_EQ(Deposit(*stub_, "max", kMax).status.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_EQ(Deposit(*stub_, "max", 1).status.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_EQ(Balance(*stub_, "max").balance, kMax);
}

// Raw bytes that no generated client would send: each is answered INVALID_ARGUMENT with a
// message that names the message type, and nothing is applied.
TEST_F(BadInputTest, UndecodableRequestBytesAreRejectedAndChangeNothing) {
  grpc::GenericStub generic(server_.NewChannel());
  const std::vector<std::pair<std::string, std::string>> calls = {
      // account_id that is not UTF-8, amount 5.
      {"Deposit", std::string("\x0a\x02\xff\xfe\x10\x05", 6)},
      {"Withdraw", std::string("\x0a\x7f", 2)},     // account_id longer than the message.
      {"Balance", std::string("\xff\xff\xff", 3)},  // not a protobuf message at all.
      {"History", std::string("\x0a\x01\xc3", 3)},  // a truncated UTF-8 sequence.
  };
  for (const auto& [method, payload] : calls) {
    SCOPED_TRACE(method);
    grpc::Slice slice(payload);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    auto context = ContextWithDeadline();
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    grpc::Status status;
    generic.UnaryCall(context.get(), "/ledger.v1.Ledger/" + method, grpc::StubOptions(), &request,
                      &response, [&](grpc::Status s) {
                        std::lock_guard<std::mutex> lock(mu);
                        status = std::move(s);
                        done = true;
                        cv.notify_one();
                      });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_THAT(status.error_message(),
                HasSubstr("the request is not a valid ledger.v1." + method + "Request: its " +
                          std::to_string(payload.size()) + " bytes are not well-formed"));
  }
  ExpectVictimUnchanged();
  EXPECT_EQ(Deposit(*stub_, "victim", 1).balance, 1001);  // And the server still serves.
}

}  // namespace
}  // namespace ledger
