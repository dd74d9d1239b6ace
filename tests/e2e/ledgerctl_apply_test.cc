// `ledgerctl apply` end to end: a file of operations against a started ledgerd (results in
// order, exit code by the worst class, balances after), a malformed file refused before anything
// is sent, stdin, a file of several batches, a re-run that replays; and against a FakeLedger, the
// retries of shed operations and of a call whose answer was lost.
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "client/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/ledgerctl_fixture.h"
#include "tests/scratch_dir.h"

namespace ledger {
namespace {

using ::testing::_;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;
using Result = testing_util::LedgerctlResult;

class LedgerctlApplyTest : public testing_util::LedgerctlTest {
 protected:
  // Writes `text` to a new file of the scratch directory; returns its path.
  std::string WriteFile(const std::string& name, const std::string& text) {
    const std::string path = scratch_.Sub(name);
    std::ofstream(path) << text;
    return path;
  }
  // What `ledgerctl balance ACCOUNT` prints on stdout.
  std::string BalanceOf(const std::string& account) {
    return Run({"balance", account}, /*stdout_only=*/true).output;
  }
  static std::vector<std::string> Lines(const std::string& output) {
    return absl::StrSplit(output, '\n', absl::SkipEmpty());
  }

  testing_util::ScratchDir scratch_;
};

// Every kind of operation, a blank line, a refusal, a NOT_FOUND, and a write without an id.
constexpr char kMixed[] =
    R"({"deposit":{"account_id":"alice","amount":"1000","request_id":"imp-1"}}
{"deposit":{"account_id":"bob","amount":"200","request_id":"imp-2"}}

{"withdraw":{"account_id":"alice","amount":"5000","request_id":"imp-3"}}
{"transfer":{"from_account_id":"alice","to_account_id":"bob","amount":"300","transfer_id":"imp-4"}}
{"balance":{"account_id":"nobody"}}
{"withdraw":{"account_id":"bob","amount":"50"}}
{"balance":{"account_id":"bob"}}
)";

TEST_F(LedgerctlApplyTest, AFileOfMixedOperationsGetsOneResultPerLineInOrder) {
  StartLedgerd();
  const std::string file = WriteFile("mixed.jsonl", kMixed);
  const Result applied = Run({"apply", file}, /*stdout_only=*/true);
  // The worst class among the results: FAILED_PRECONDITION (3) is worse than NOT_FOUND (4).
  EXPECT_EQ(applied.exit_code, kExitRejected);
  const std::vector<std::string> lines = Lines(applied.output);
  ASSERT_EQ(lines.size(), 7u) << applied.output;
  EXPECT_EQ(lines[0], R"({"line":1,"id":"imp-1","code":"OK","balance":"1000","replayed":false})");
  EXPECT_EQ(lines[1], R"({"line":2,"id":"imp-2","code":"OK","balance":"200","replayed":false})");
  EXPECT_EQ(lines[2],
            R"({"line":4,"id":"imp-3","code":"FAILED_PRECONDITION","message":"insufficient )"
            R"(funds: balance 1000, requested 5000, overdraft limit 0"})");
  EXPECT_EQ(lines[3], R"({"line":5,"id":"imp-4","code":"OK","balance":"700","to_balance":"500",)"
                      R"("replayed":false})");
  EXPECT_EQ(lines[4], R"({"line":6,"code":"NOT_FOUND","message":"account nobody not found: it )"
                      R"(has never received a deposit"})");
  // A write without an id got one, as `ledgerctl withdraw` would give it.
  EXPECT_THAT(lines[5], MatchesRegex(R"(\{"line":7,"id":"ledgerctl-[0-9a-f]{16}","code":"OK",)"
                                     R"("balance":"450","replayed":false\})"));
  EXPECT_EQ(lines[6], R"({"line":8,"code":"OK","balance":"450"})");
  EXPECT_EQ(BalanceOf("alice"), "alice: 700\n");
  EXPECT_EQ(BalanceOf("bob"), "bob: 450\n");
}

TEST_F(LedgerctlApplyTest, ASummaryOnStderrCountsTheResultsByCode) {
  StartLedgerd();
  const Result applied = Run({"apply", WriteFile("mixed.jsonl", kMixed)});
  EXPECT_THAT(applied.output,
              ::testing::EndsWith("}\nledgerctl: 7 operations in 1 Apply call: OK 5, NOT_FOUND 1, "
                                  "FAILED_PRECONDITION 1\n"));
  // With --json, stderr carries JSON only: no summary.
  const Result json = Run({"--json", "apply", WriteFile("empty.jsonl", "\n")});
  EXPECT_EQ(json.exit_code, kExitOk);
  EXPECT_EQ(json.output, "");
}

TEST_F(LedgerctlApplyTest, AMalformedLineIsAUsageErrorNamingItAndNothingIsSent) {
  StartLedgerd();
  const std::string file = WriteFile(
      "bad.jsonl",
      "{\"deposit\":{\"account_id\":\"erin\",\"amount\":\"100\",\"request_id\":\"b-1\"}}\n"
      "{\"deposit\":{\"account_id\":\"erin\",\"amount\":\"ten\",\"request_id\":\"b-2\"}}\n"
      "{\"deposit\":{\"account_id\":\"frank\",\"amount\":\"5\"}}\n"
      "{}\n");
  const Result refused = Run({"apply", file});
  EXPECT_EQ(refused.exit_code, kExitUsage);
  EXPECT_THAT(refused.output,
              ::testing::StartsWith("ledgerctl: apply: nothing was sent; in \"" + file +
                                    "\":\n  line 2: not a ledger.v1.ApplyOperation in JSON: "));
  EXPECT_THAT(refused.output, HasSubstr("\n  line 4: sets no operation: it needs one of deposit, "
                                        "withdraw, balance or transfer"));
  EXPECT_THAT(refused.output, HasSubstr("`ledgerctl --help` explains"));
  EXPECT_THAT(refused.output, Not(HasSubstr("\"line\":")));  // No result was printed.
  // Line 1 and line 3 were valid, and were not applied either.
  EXPECT_EQ(Run({"balance", "erin"}).exit_code, kExitNotFound);
  EXPECT_EQ(Run({"balance", "frank"}).exit_code, kExitNotFound);
}

TEST_F(LedgerctlApplyTest, DashReadsTheOperationsFromStdin) {
  StartLedgerd();
  const std::string file = WriteFile(
      "stdin.jsonl",
      "{\"deposit\":{\"account_id\":\"gina\",\"amount\":\"40\",\"request_id\":\"s-1\"}}\n"
      "{\"withdraw\":{\"account_id\":\"gina\",\"amount\":\"15\",\"request_id\":\"s-2\"}}\n");
  const Result applied = Run({"apply", "-"}, /*stdout_only=*/true, file);
  EXPECT_EQ(applied.exit_code, kExitOk);
  EXPECT_EQ(applied.output,
            "{\"line\":1,\"id\":\"s-1\",\"code\":\"OK\",\"balance\":\"40\",\"replayed\":false}\n"
            "{\"line\":2,\"id\":\"s-2\",\"code\":\"OK\",\"balance\":\"25\",\"replayed\":false}\n");
  EXPECT_EQ(BalanceOf("gina"), "gina: 25\n");
}

// 2,500 deposits over 50 accounts, with ids: three Apply calls of at most 1,000.
constexpr int kBigFileOperations = 2500;
constexpr int kBigFileAccounts = 50;

std::string BigFile() {
  std::string text;
  for (int i = 0; i < kBigFileOperations; ++i) {
    absl::StrAppend(&text, "{\"deposit\":{\"account_id\":\"acct-", i % kBigFileAccounts,
                    "\",\"amount\":\"", i % 7 + 1, "\",\"request_id\":\"big-", i, "\"}}\n");
  }
  return text;
}

// What BigFile() leaves on acct-`account`.
int64_t BigFileBalance(int account) {
  int64_t balance = 0;
  for (int i = account; i < kBigFileOperations; i += kBigFileAccounts) balance += i % 7 + 1;
  return balance;
}

TEST_F(LedgerctlApplyTest, AFileOfSeveralBatchesIsAppliedInFullAndInOrder) {
  StartLedgerd();
  const Result applied = Run({"--batch_size=1000", "apply", WriteFile("big.jsonl", BigFile())});
  EXPECT_EQ(applied.exit_code, kExitOk);
  std::vector<std::string> lines = Lines(applied.output);
  ASSERT_EQ(lines.size(), kBigFileOperations + 1u);  // And the summary.
  EXPECT_EQ(lines.back(), "ledgerctl: 2500 operations in 3 Apply calls: OK 2500");
  lines.pop_back();
  for (int i = 0; i < kBigFileOperations; ++i) {
    ASSERT_THAT(lines[i], ::testing::StartsWith(absl::StrCat("{\"line\":", i + 1, ",\"id\":\"big-",
                                                             i, "\",\"code\":\"OK\",")))
        << i;
  }
  for (int account = 0; account < kBigFileAccounts; ++account) {
    EXPECT_EQ(BalanceOf(absl::StrCat("acct-", account)),
              absl::StrCat("acct-", account, ": ", BigFileBalance(account), "\n"));
  }
}

TEST_F(LedgerctlApplyTest, ARerunOfTheSameFileReplaysEveryWriteAndChangesNoBalance) {
  StartLedgerd();
  const std::string file = WriteFile(
      "writes.jsonl",
      "{\"deposit\":{\"account_id\":\"hal\",\"amount\":\"500\",\"request_id\":\"w-1\"}}\n"
      "{\"deposit\":{\"account_id\":\"ivy\",\"amount\":\"70\",\"request_id\":\"w-2\"}}\n"
      "{\"withdraw\":{\"account_id\":\"hal\",\"amount\":\"20\",\"request_id\":\"w-3\"}}\n"
      "{\"transfer\":{\"from_account_id\":\"hal\",\"to_account_id\":\"ivy\",\"amount\":\"80\","
      "\"transfer_id\":\"w-4\"}}\n"
      "{\"deposit\":{\"account_id\":\"ivy\",\"amount\":\"1\",\"request_id\":\"w-5\"}}\n");
  const Result first = Run({"--batch_size=2", "apply", file}, /*stdout_only=*/true);
  ASSERT_EQ(first.exit_code, kExitOk) << first.output;
  const Result again = Run({"--batch_size=2", "apply", file}, /*stdout_only=*/true);
  EXPECT_EQ(again.exit_code, kExitOk);
  // The same results, each the recorded one: nothing was applied the second time.
  EXPECT_EQ(again.output,
            absl::StrReplaceAll(first.output, {{"\"replayed\":false", "\"replayed\":true"}}));
  EXPECT_THAT(Lines(again.output), ::testing::Each(HasSubstr("\"replayed\":true}")));
  EXPECT_THAT(Lines(again.output), ElementsAre(HasSubstr("\"balance\":\"500\""), _, _,
                                               HasSubstr("\"to_balance\":\"150\""), _));
  EXPECT_EQ(BalanceOf("hal"), "hal: 400\n");
  EXPECT_EQ(BalanceOf("ivy"), "ivy: 151\n");
}

TEST_F(LedgerctlApplyTest, ABatchSizeOutOfRangeIsAUsageError) {
  const std::string file = WriteFile("one.jsonl", "{\"balance\":{\"account_id\":\"a\"}}\n");
  target_ = "--target=127.0.0.1:1";  // Nothing is sent.
  for (const char* flag : {"--batch_size=0", "--batch_size=8193"}) {
    const Result refused = Run({flag, "apply", file});
    EXPECT_EQ(refused.exit_code, kExitUsage) << flag;
    EXPECT_THAT(refused.output, HasSubstr("--batch_size must be 1 to 8192")) << flag;
  }
  EXPECT_EQ(Run({"apply"}).exit_code, kExitUsage);
  EXPECT_EQ(Run({"apply", scratch_.Sub("missing.jsonl")}).exit_code, kExitUsage);
}

TEST_F(LedgerctlApplyTest, AnUnreachableServerStopsAfterTheFirstBatchAndTheRestIsNotSent) {
  target_ = "--target=127.0.0.1:1";  // Nothing listens on port 1.
  const std::string file =
      WriteFile("two.jsonl",
                "{\"deposit\":{\"account_id\":\"a\",\"amount\":\"1\",\"request_id\":\"u-1\"}}\n"
                "{\"deposit\":{\"account_id\":\"a\",\"amount\":\"1\",\"request_id\":\"u-2\"}}\n");
  const Result failed = Run({"--retries=1", "--batch_size=1", "apply", file});
  EXPECT_EQ(failed.exit_code, kExitUnavailable);
  EXPECT_THAT(failed.output, HasSubstr("ledgerctl: the Apply call for line 1 (1 operation) "
                                       "failed: UNAVAILABLE: "));
  EXPECT_THAT(failed.output, HasSubstr("; retrying in 100 ms (attempt 2 of 2)\n"));
  EXPECT_THAT(failed.output, HasSubstr("not retrying: all 2 attempts failed\n"));
  EXPECT_THAT(failed.output, HasSubstr("{\"line\":1,\"id\":\"u-1\",\"code\":\"UNAVAILABLE\","));
  EXPECT_THAT(failed.output,
              HasSubstr("{\"line\":2,\"id\":\"u-2\",\"code\":\"NOT_SENT\",\"message\":\"not sent: "
                        "the Apply call for line 1 failed (UNAVAILABLE) and ledgerctl stopped "
                        "there; nothing of it was applied\"}\n"));
}

// Retries, against the FakeLedger.

TEST_F(LedgerctlApplyTest, ShedOperationsAreSentAgainWithTheirIdsAfterThePushback) {
  StartFakeLedger({.attempts_shed = 1, .pushback_ms = "5"});
  const std::string file =
      WriteFile("shed.jsonl",
                "{\"deposit\":{\"account_id\":\"jo\",\"amount\":\"9\",\"request_id\":\"x-1\"}}\n"
                "{\"deposit\":{\"account_id\":\"jo\",\"amount\":\"1\"}}\n");
  const Result applied = Run({"apply", file});
  EXPECT_EQ(applied.exit_code, kExitOk) << applied.output;
  EXPECT_THAT(applied.output,
              HasSubstr("ledgerctl: 2 operations of lines 1-2 shed by the server "
                        "(RESOURCE_EXHAUSTED: nothing of them was applied); retrying them in 5 ms "
                        "(attempt 2 of 4)\n"));
  EXPECT_THAT(applied.output, HasSubstr("\"balance\":\"10\",\"replayed\":false}\n"));
  const std::vector<std::string> ids = fake_->request_ids();
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids[0], "x-1");
  EXPECT_THAT(ids[1], ::testing::StartsWith("ledgerctl-"));
  EXPECT_THAT(ids, ElementsAre(ids[0], ids[1], ids[0], ids[1]));  // The same ids, resent.
  EXPECT_EQ(fake_->apply_calls(), 2);
  EXPECT_EQ(fake_->balance_sum(), 10);
}

TEST_F(LedgerctlApplyTest, ACallWhoseAnswerWasLostIsSentAgainAndAppliedOnce) {
  StartFakeLedger({.apply_calls_lost = 1});
  const std::string file = WriteFile("lost.jsonl",
                                     "{\"deposit\":{\"account_id\":\"kim\",\"amount\":\"30\"}}\n"
                                     "{\"withdraw\":{\"account_id\":\"kim\",\"amount\":\"10\"}}\n");
  const Result applied = Run({"apply", file});
  EXPECT_EQ(applied.exit_code, kExitOk) << applied.output;
  EXPECT_THAT(applied.output,
              HasSubstr("ledgerctl: the Apply call for lines 1-2 (2 operations) failed: "
                        "UNAVAILABLE: fake: connection lost after the Apply call; retrying in 100 "
                        "ms (attempt 2 of 4)\n"));
  // The first call applied both; the retry, with the same generated ids, replays them.
  EXPECT_THAT(applied.output, HasSubstr("\"balance\":\"30\",\"replayed\":true}\n"));
  EXPECT_THAT(applied.output, HasSubstr("\"balance\":\"20\",\"replayed\":true}\n"));
  EXPECT_EQ(fake_->apply_calls(), 2);
  EXPECT_EQ(fake_->balance_sum(), 20);
}

}  // namespace
}  // namespace ledger
