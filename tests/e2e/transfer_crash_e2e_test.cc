// A crash at every durable step of a transfer across shards: ledgerd is started with
// --debug_crash_after_transfer_step, exits (as a crash) right after that step is durable, and is
// started again. The transfer then ends exactly once, COMMITTED or REFUSED, with the balances,
// the History entries and the conservation sum exact.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ledger/v1/ledger.grpc.pb.h"
#include "tests/e2e/ledger_dir.h"
#include "tests/e2e/ledgerd_process.h"
#include "tests/http_get.h"
#include "tests/metrics_text.h"
#include "tests/scratch_dir.h"
#include "tests/shard/shard_test_util.h"
#include "tests/test_paths.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;
using testing_util::ScratchDir;

constexpr int32_t kShards = 2;
constexpr int kCrashExitCode = 86;  // ledgerd's --debug_crash_after_transfer_step exit.

std::string OnShard(const std::string& prefix, int32_t shard) {
  return testing_util::AccountOnShard(prefix, shard, kShards);
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return context;
}

struct Scenario {
  std::string step;  // debited, credited or settled.
  bool refused;      // The destination was never opened: the debit is refunded.
};

class TransferCrashTest : public testing::TestWithParam<Scenario> {
 protected:
  void SetUp() override { testing_util::InitLedgerDir(scratch_.Sub("data")); }

  // Starts ledgerd on the test's ledger with `extra` flags (the one before is stopped).
  ::testing::AssertionResult Start(const std::vector<std::string>& extra) {
    std::vector<std::string> flags = {absl::StrCat("--shards=", kShards),
                                      "--data_dir=" + scratch_.Sub("data")};
    flags.insert(flags.end(), extra.begin(), extra.end());
    ledgerd_ = std::make_unique<testing_util::LedgerdProcess>(flags);
    ::testing::AssertionResult started = ledgerd_->Start();
    metrics_port_ = ledgerd_->metrics_port();
    stub_ = v1::Ledger::NewStub(
        grpc::CreateChannel(ledgerd_->target(), grpc::InsecureChannelCredentials()));
    return started;
  }

  void Deposit(const std::string& account, int64_t amount) {
    v1::DepositRequest request;
    request.set_account_id(account);
    request.set_amount(amount);
    request.set_request_id("open-" + account);
    v1::DepositResponse response;
    grpc::Status status = stub_->Deposit(Context().get(), request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }

  grpc::Status Transfer(v1::TransferResponse& response) {
    v1::TransferRequest request;
    request.set_transfer_id("crash-transfer");
    request.set_from_account_id(from_);
    request.set_to_account_id(to_);
    request.set_amount(300);
    return stub_->Transfer(Context().get(), request, &response);
  }

  // The account's balance; nullopt when NOT_FOUND.
  std::optional<int64_t> BalanceOf(const std::string& account) {
    v1::BalanceRequest request;
    request.set_account_id(account);
    v1::BalanceResponse response;
    grpc::Status status = stub_->Balance(Context().get(), request, &response);
    if (status.error_code() == grpc::StatusCode::NOT_FOUND) return std::nullopt;
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.balance();
  }

  std::vector<v1::Operation> HistoryOf(const std::string& account) {
    v1::HistoryRequest request;
    request.set_account_id(account);
    v1::HistoryResponse response;
    grpc::Status status = stub_->History(Context().get(), request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    std::vector<v1::Operation> operations;
    for (const v1::HistoryEntry& entry : response.entries()) {
      operations.insert(operations.begin(), entry.operation());  // Oldest first.
    }
    return operations;
  }

  ScratchDir scratch_;
  std::unique_ptr<testing_util::LedgerdProcess> ledgerd_;
  std::unique_ptr<v1::Ledger::Stub> stub_;
  int metrics_port_ = 0;
  const std::string from_ = OnShard("from", 0);
  const std::string to_ = OnShard("to", 1);
};

TEST_P(TransferCrashTest, TheTransferEndsExactlyOnceAfterTheRestart) {
  const Scenario& scenario = GetParam();
  ASSERT_TRUE(Start({"--debug_crash_after_transfer_step=" + scenario.step}));
  Deposit(from_, 1000);
  if (!scenario.refused) Deposit(to_, 500);
  const int64_t total = scenario.refused ? 1000 : 1500;

  v1::TransferResponse response;
  grpc::Status crashed = Transfer(response);
  // The process died before it could answer: the caller cannot know the outcome.
  EXPECT_FALSE(crashed.ok());
  EXPECT_EQ(ledgerd_->WaitForExit(std::chrono::seconds(10)), kCrashExitCode) << ledgerd_->log();
  EXPECT_THAT(ledgerd_->log(), HasSubstr("is " + scenario.step + "; exiting now"));

  ASSERT_TRUE(Start({}));
  if (scenario.step != "settled") {
    EXPECT_THAT(ledgerd_->log(), HasSubstr("resuming 1 pending transfer"));
  }
  // Resumed in the background: it ends on its own, without a retry.
  v1::GetTransferResponse got;
  ASSERT_TRUE(testing_util::WaitUntil(
      [&] {
        v1::GetTransferRequest request;
        request.set_transfer_id("crash-transfer");
        got.Clear();
        return stub_->GetTransfer(Context().get(), request, &got).ok() &&
               got.state() != v1::TRANSFER_STATE_PENDING;
      },
      "the transfer is final"));
  if (scenario.refused) {
    EXPECT_EQ(got.state(), v1::TRANSFER_STATE_REFUSED);
    EXPECT_EQ(got.refusal_code(), static_cast<int32_t>(grpc::StatusCode::NOT_FOUND));
    EXPECT_EQ(BalanceOf(from_), 1000);
    EXPECT_EQ(BalanceOf(to_), std::nullopt);
    EXPECT_EQ(HistoryOf(from_),
              (std::vector<v1::Operation>{v1::OPERATION_DEPOSIT, v1::OPERATION_TRANSFER_OUT,
                                          v1::OPERATION_TRANSFER_REFUND}));
  } else {
    EXPECT_EQ(got.state(), v1::TRANSFER_STATE_COMMITTED);
    EXPECT_EQ(BalanceOf(from_), 700);
    EXPECT_EQ(BalanceOf(to_), 800);
    EXPECT_EQ(HistoryOf(from_),
              (std::vector<v1::Operation>{v1::OPERATION_DEPOSIT, v1::OPERATION_TRANSFER_OUT}));
    EXPECT_EQ(HistoryOf(to_),
              (std::vector<v1::Operation>{v1::OPERATION_DEPOSIT, v1::OPERATION_TRANSFER_IN}));
  }
  // Conservation: nothing left in flight, and the balances hold every deposit.
  EXPECT_EQ(BalanceOf(from_).value_or(0) + BalanceOf(to_).value_or(0), total);
  const std::optional<testing_util::HttpResponse> scrape =
      testing_util::HttpGet(metrics_port_, "/metrics");
  ASSERT_TRUE(scrape.has_value());
  EXPECT_EQ(testing_util::SampleValue(scrape->body, "ledger_transfers_in_flight_amount"), 0.0);
  // The caller's retry learns the recorded outcome, applied nothing more.
  grpc::Status retried = Transfer(response);
  if (scenario.refused) {
    EXPECT_EQ(retried.error_code(), grpc::StatusCode::NOT_FOUND) << retried.error_message();
    EXPECT_THAT(retried.error_message(), HasSubstr("recorded result"));
  } else {
    ASSERT_TRUE(retried.ok()) << retried.error_message();
    EXPECT_TRUE(response.replayed());
    EXPECT_EQ(response.from_balance(), 700);
    EXPECT_EQ(response.to_balance(), 800);
  }
  EXPECT_EQ(BalanceOf(from_).value_or(0) + BalanceOf(to_).value_or(0), total);
}

INSTANTIATE_TEST_SUITE_P(EveryStep, TransferCrashTest,
                         testing::Values(Scenario{"debited", false}, Scenario{"credited", false},
                                         Scenario{"settled", false}, Scenario{"debited", true},
                                         Scenario{"credited", true}, Scenario{"settled", true}),
                         [](const testing::TestParamInfo<Scenario>& info) {
                           return absl::StrCat(info.param.refused ? "Refused" : "Committed",
                                               "AfterStep", info.param.step);
                         });

}  // namespace
}  // namespace ledger
