// ledgerctl end to end against a ledgerd it starts: every command, every exit code class.
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <regex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "client/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/calls_at_shards.h"
#include "tests/e2e/fake_ledger.h"
#include "tests/e2e/ledger_dir.h"
#include "tests/e2e/ledgerctl_fixture.h"
#include "tests/e2e/subprocess.h"
#include "tests/scratch_dir.h"
#include "tests/test_paths.h"
#include "tests/wait_until.h"

namespace ledger {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing_util::Subprocess;

using Result = testing_util::LedgerctlResult;
using LedgerctlTest = testing_util::LedgerctlTest;

TEST_F(LedgerctlTest, AnUnknownOutcomePrintsTheCommandThatRetriesSafely) {
  StartLedgerd({"--debug_handler_delay=300ms"});
  Result named = Run({"--deadline=50ms", "deposit", "carol", "5", "--request_id=r-slow"});
  EXPECT_EQ(named.exit_code, kExitUnavailable);
  EXPECT_THAT(named.output, HasSubstr("DEADLINE_EXCEEDED"));
  EXPECT_THAT(named.output,
              HasSubstr("ledgerctl: outcome unknown: the deposit may have been applied. Retry it "
                        "exactly like this, which applies it at most once:\n  ledgerctl " +
                        target_ + " deposit carol 5 --request_id=r-slow\n"));
  // Without --request_id, ledgerctl made one up, and the retry command carries it.
  Result unnamed = Run({"--deadline=50ms", "deposit", "carol", "7"});
  EXPECT_EQ(unnamed.exit_code, kExitUnavailable);
  const size_t at = unnamed.output.find("--request_id=ledgerctl-");
  ASSERT_NE(at, std::string::npos) << unnamed.output;
  const std::string generated = unnamed.output.substr(at + 13, 26);  // "ledgerctl-" + 16 hex.
  // The retries, run as printed, apply each first call at most once: whether the server
  // applied it before its caller gave up (the retry is then a replay) or skipped it (the retry
  // applies it now), the balance holds each deposit exactly once.
  // No wait for the first calls to settle: a shard takes its calls in order, so each retry
  // runs after its original was either applied (the retry is a replay) or skipped (the retry
  // applies it), and an original that reaches the server after its retry is a replay.
  EXPECT_EQ(Run({"deposit", "carol", "5", "--request_id=r-slow"}).exit_code, kExitOk);
  Result retry = Run({"deposit", "carol", "7", "--request_id=" + generated});
  EXPECT_EQ(retry.exit_code, kExitOk) << retry.output;
  EXPECT_EQ(Run({"balance", "carol"}).output, "carol: 12\n");
}

TEST_F(LedgerctlTest, AReplayedCallSaysItIsTheRecordedResult) {
  StartLedgerd();
  EXPECT_EQ(Run({"deposit", "alice", "1500", "--request_id=pay-1"}).output, "alice: 1500\n");
  EXPECT_EQ(Run({"withdraw", "alice", "400"}).output, "alice: 1100\n");
  EXPECT_EQ(Run({"deposit", "alice", "1500", "--request_id=pay-1"}).output,
            "alice: 1500 (replayed: the recorded result of an earlier deposit with request_id "
            "pay-1; nothing was applied now, and the balance may have changed since)\n");
  EXPECT_EQ(Run({"balance", "alice"}).output, "alice: 1100\n");
}

TEST_F(LedgerctlTest, ACallThatCannotConnectSaysNothingWasSent) {
  target_ = "--target=127.0.0.1:1";  // Nothing listens on port 1.
  Result refused = Run({"--deadline=2s", "deposit", "alice", "5"});
  EXPECT_EQ(refused.exit_code, kExitUnavailable);
  EXPECT_THAT(refused.output, HasSubstr("ledgerctl: UNAVAILABLE: no connection to 127.0.0.1:1"));
  EXPECT_THAT(refused.output,
              HasSubstr("ledgerctl: the deposit was not sent, so nothing was applied"));
  EXPECT_THAT(refused.output, ::testing::Not(HasSubstr("outcome unknown")));
}

TEST_F(LedgerctlTest, EveryCommandPrintsForAPerson) {
  StartLedgerd();
  Result deposit = Run({"deposit", "alice", "1500"});
  EXPECT_EQ(deposit.exit_code, kExitOk);
  EXPECT_EQ(deposit.output, "alice: 1500\n");
  EXPECT_EQ(Run({"withdraw", "alice", "400"}).output, "alice: 1100\n");
  EXPECT_EQ(Run({"balance", "alice"}).output, "alice: 1100\n");
  Result health = Run({"health"});
  EXPECT_EQ(health.exit_code, kExitOk);
  EXPECT_EQ(health.output, "SERVING\n");
  EXPECT_EQ(Run({"deposit", "alice", "5", "--request_id=r-1"}).output, "alice: 1105\n");
  Result cluster = Run({"cluster", "status"});
  EXPECT_EQ(cluster.exit_code, kExitOk);
  EXPECT_TRUE(std::regex_match(
      cluster.output, std::regex(ledgerd_->target() + " is a single node \\(run without --peers\\) "
                                                      "of ledger [0-9a-f]{32}; it serves\n")))
      << cluster.output;
}

TEST_F(LedgerctlTest, HistoryListsNewestFirstAndARetriedRequestIdIsAppliedOnce) {
  StartLedgerd();
  EXPECT_EQ(Run({"deposit", "dave", "100", "--request_id=d-1"}).output, "dave: 100\n");
  EXPECT_THAT(Run({"deposit", "dave", "100", "--request_id=d-1"}).output,
              ::testing::StartsWith("dave: 100 (replayed: "));
  Result reused = Run({"deposit", "dave", "7", "--request_id=d-1"});
  EXPECT_EQ(reused.exit_code, kExitRejected);
  EXPECT_THAT(reused.output,
              HasSubstr("ledgerctl: ALREADY_EXISTS: request_id \"d-1\" was already used on "
                        "account dave for a deposit of 100; this call is a deposit of 7"));
  EXPECT_EQ(Run({"withdraw", "dave", "30"}).output, "dave: 70\n");

  Result history = Run({"history", "dave"});
  EXPECT_EQ(history.exit_code, kExitOk);
  EXPECT_THAT(history.output,
              ::testing::StartsWith("SEQ    TIME (UTC)               OPERATION             AMOUNT  "
                                    "BALANCE AFTER  REQUEST ID (TRANSFER ID AND ACCOUNT)\n"));
  EXPECT_THAT(history.output,
              ::testing::ContainsRegex(
                  "\n2 +20[0-9-]+T[0-9:.]+Z withdraw +30 +70  ledgerctl-[0-9a-f]+\n1 +20[0-9-]+T"
                  "[0-9:.]+Z deposit +100 +100  d-1\n$"));
  EXPECT_THAT(Run({"history", "dave", "--page_size=1"}).output,
              HasSubstr("older entries: ledgerctl history dave --page_token=1\n"));
  EXPECT_THAT(Run({"--json", "history", "dave", "--page_size=1"}, true).output,
              ::testing::ContainsRegex(
                  "^\\{\"account_id\":\"dave\",\"entries\":\\[\\{\"sequence\":\"2\","
                  "\"operation\":\"withdraw\",\"amount\":\"30\",\"balance_after\":\"70\","
                  "\"request_id\":\"ledgerctl-[0-9a-f]+\",\"time\":\"20[0-9TZ:.-]+\"\\}\\],\"next_"
                  "page_token\":"
                  "\"1\"\\}\n$"));
  EXPECT_EQ(Run({"history", "nobody"}).exit_code, kExitNotFound);
  EXPECT_EQ(Run({"history"}).exit_code, kExitUsage);
}

TEST_F(LedgerctlTest, JsonOutputIsOneObjectPerLine) {
  StartLedgerd();
  EXPECT_EQ(Run({"--json", "deposit", "bob", "250", "--request_id=j-1"}, true).output,
            "{\"account_id\":\"bob\",\"balance\":\"250\",\"request_id\":\"j-1\","
            "\"replayed\":false}\n");
  EXPECT_EQ(Run({"--json", "balance", "bob"}, true).output,
            "{\"account_id\":\"bob\",\"balance\":\"250\"}\n");
  EXPECT_EQ(Run({"--json", "health"}, true).output, "{\"status\":\"SERVING\"}\n");
  const std::string cluster_json = Run({"--json", "cluster", "status"}, true).output;
  EXPECT_TRUE(std::regex_match(
      cluster_json, std::regex("\\{\"address\":\"" + ledgerd_->target() +
                               "\",\"role\":\"single-node\",\"ledger_id\":\"[0-9a-f]{32}\"\\}\n")))
      << cluster_json;
  Result error = Run({"--json", "balance", "nobody"});
  EXPECT_EQ(error.exit_code, kExitNotFound);
  EXPECT_EQ(error.output,
            "{\"code\":\"NOT_FOUND\",\"message\":\"account nobody not found: it has never "
            "received a deposit\"}\n");
}

TEST_F(LedgerctlTest, ExitCodesNameTheClassOfFailure) {
  StartLedgerd();
  ASSERT_EQ(Run({"deposit", "carol", "100"}).exit_code, kExitOk);
  Result refused = Run({"withdraw", "carol", "500"});
  EXPECT_EQ(refused.exit_code, kExitRejected);
  EXPECT_EQ(refused.output,
            "ledgerctl: FAILED_PRECONDITION: insufficient funds: balance 100, requested 500, "
            "overdraft limit 0\n");
  EXPECT_EQ(Run({"deposit", "carol", "0"}).exit_code, kExitUsage);  // Refused before sending.
  EXPECT_EQ(Run({"deposit", "bad id", "5"}).exit_code, kExitRejected);
  EXPECT_EQ(Run({"balance", "nobody"}).exit_code, kExitNotFound);
  EXPECT_EQ(Run({"withdraw", "nobody", "1"}).exit_code, kExitNotFound);
  for (const std::vector<std::string>& usage : {std::vector<std::string>{},
                                                {"frobnicate"},
                                                {"deposit", "carol"},
                                                {"deposit", "carol", "ten"},
                                                {"balance"},
                                                {"health", "extra"},
                                                {"cluster"},
                                                {"cluster", "stats"},
                                                {"balance", "carol", "--request_id=x"},
                                                {"--deadline=0s", "health"}}) {
    Result result = Run(usage);
    EXPECT_EQ(result.exit_code, kExitUsage) << result.output;
    EXPECT_THAT(result.output, HasSubstr("ledgerctl --help"));
  }
  EXPECT_EQ(Run({"balance", "carol"}).output, "carol: 100\n");  // Nothing else was applied.
}

TEST_F(LedgerctlTest, UnreachableServerIsUnavailable) {
  target_ = "--target=127.0.0.1:1";
  for (const char* command : {"health", "balance"}) {
    std::vector<std::string> args = {"--deadline=2s", command};
    if (std::string(command) == "balance") args.push_back("x");
    Result result = Run(args);
    EXPECT_EQ(result.exit_code, kExitUnavailable) << result.output;
    EXPECT_THAT(result.output, HasSubstr("ledgerctl: UNAVAILABLE: "));
  }
}

TEST_F(LedgerctlTest, ShedCallIsOverloaded) {
  // One call in the handler for 2 s, one queued behind it: with a journal the capacity counts
  // every call accepted and not yet answered, so at capacity 2 a third is shed.
  StartLedgerd({"--mailbox_capacity=2", "--max_batch=1", "--debug_handler_delay=2s",
                "--metrics_listen=127.0.0.1:0"});
  const int metrics_port = ledgerd_->metrics_port();
  ASSERT_GT(metrics_port, 0) << ledgerd_->log();
  Result results[3];
  std::vector<std::thread> callers;
  callers.reserve(2);
  for (int i = 0; i < 2; ++i) {
    callers.emplace_back([this, &results, i] {
      results[i] = Run({"--retries=0", "deposit", "dave", "1"});
    });
  }
  // The third starts once a call is seen at the shard (the queued one, while the first is in its
  // 2 s handler): both hold their places until answered, so exactly one call finds the shard full.
  EXPECT_TRUE(testing_util::WaitUntil(
      [&] { return testing_util::CallsAtShards(metrics_port, 2, "deposit").value_or(0) >= 1; },
      "a deposit reaches the shard", testing_util::kEventTimeout, std::chrono::milliseconds(10)));
  // --retries=0: the shed call is the subject here, not what a retry after pushback makes of it.
  results[2] = Run({"--retries=0", "deposit", "dave", "1"});
  for (std::thread& caller : callers) caller.join();
  int shed = 0;
  for (const Result& result : results) {
    if (result.exit_code == kExitOk) continue;
    ++shed;
    EXPECT_EQ(result.exit_code, kExitUnavailable) << result.output;
    EXPECT_THAT(result.output, HasSubstr("ledgerctl: RESOURCE_EXHAUSTED: shard "));
    EXPECT_THAT(result.output, HasSubstr("nothing was applied"));
  }
  EXPECT_EQ(shed, 1);
  EXPECT_EQ(Run({"balance", "dave"}).output, "dave: 2\n");  // The shed call changed nothing.
}

TEST_F(LedgerctlTest, TargetWithOnlyAPortIsLocalhost) {
  StartLedgerd();
  // The name "localhost" goes through gRPC's c-ares resolver, which leaks 10 bytes once
  // (libcares.so.2) under LeakSanitizer: not ledgerctl's, so leak checking is off for this call.
  Subprocess ledgerctl({"/usr/bin/env", "LSAN_OPTIONS=detect_leaks=0",
                        testing_util::LedgerctlPath(),
                        "--target=:" + target_.substr(target_.rfind(':') + 1), "health"});
  EXPECT_EQ(ledgerctl.WaitForExit(), kExitOk) << ledgerctl.output();
  EXPECT_EQ(ledgerctl.output(), "SERVING\n");
}

struct CommandLineCase {
  std::vector<std::string> args;
  std::string message;  // The first line; the second points to --help.
};

class LedgerctlCommandLineTest : public testing::TestWithParam<CommandLineCase> {};

// Nothing listens on the target: a usage error is found before any call.
TEST_P(LedgerctlCommandLineTest, IsRefusedWithExitTwoBeforeAnythingIsSent) {
  std::vector<std::string> argv = {testing_util::LedgerctlPath(), "--target=127.0.0.1:1"};
  argv.insert(argv.end(), GetParam().args.begin(), GetParam().args.end());
  Subprocess ledgerctl(argv);
  EXPECT_EQ(ledgerctl.WaitForExit(), kExitUsage) << ledgerctl.output();
  EXPECT_EQ(ledgerctl.output(), "ledgerctl: " + GetParam().message +
                                    "\n`ledgerctl --help` explains the usage and every flag\n");
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LedgerctlCommandLineTest,
    testing::Values(
        CommandLineCase{{"deposit", "alice", "-5"},
                        "AMOUNT must be positive; got -5 (to take money out, use withdraw)"},
        CommandLineCase{{"withdraw", "alice", "0"},
                        "AMOUNT must be positive; got 0 (to put money in, use deposit)"},
        CommandLineCase{{"--", "deposit", "alice", "-1"},
                        "AMOUNT must be positive; got -1 (to take money out, use withdraw)"},
        CommandLineCase{{"deposit", "alice", "5.00"},
                        "AMOUNT must be an integer number of minor units; got \"5.00\""},
        CommandLineCase{{"depsit", "alice", "5"},
                        "unknown command \"depsit\"; did you mean deposit?"},
        CommandLineCase{
            {"frobnicate"},
            "unknown command \"frobnicate\"; the commands are deposit, withdraw, "
            "balance, history, transfer, get-transfer, apply, health, backup, cluster and watch"},
        CommandLineCase{{},
                        "missing command (deposit, withdraw, balance, history, transfer, "
                        "get-transfer, apply, health, backup, cluster or watch)"},
        CommandLineCase{{"transfer", "alice", "bob", "-5"},
                        "AMOUNT must be positive; got -5 (to move money back, swap FROM and TO)"},
        CommandLineCase{{"transfer", "alice", "bob", "1.5"},
                        "AMOUNT must be an integer number of minor units; got \"1.5\""},
        CommandLineCase{{"transfr", "alice", "bob", "5"},
                        "unknown command \"transfr\"; did you mean transfer?"},
        CommandLineCase{{"--deadline=5", "health"},
                        "Illegal value '5' specified for flag 'deadline'; durations need a unit, "
                        "e.g. 5s, 250ms or 1m30s"},
        CommandLineCase{{"--dedline=5s", "health"},
                        "Unknown command line flag 'dedline'; did you mean --deadline?"},
        CommandLineCase{{"--json=maybe", "health"},
                        "Illegal value 'maybe' specified for flag 'json'; use true or false"},
        CommandLineCase{{"--target=localhost", "health"},
                        "--target needs HOST:PORT, e.g. 127.0.0.1:50051 or :50051; got "
                        "\"localhost\": no port"},
        CommandLineCase{{"--target=127.0.0.1:0", "health"},
                        "--target needs HOST:PORT, e.g. 127.0.0.1:50051 or :50051; got "
                        "\"127.0.0.1:0\": port 0 is out of range (1 to 65535)"},
        CommandLineCase{{"--target=127.0.0.1:65536", "health"},
                        "--target needs HOST:PORT, e.g. 127.0.0.1:50051 or :50051; got "
                        "\"127.0.0.1:65536\": port 65536 is out of range (1 to 65535)"}));

TEST(LedgerctlHelpTest, HelpAndHListTheFlagsAndExitZero) {
  Subprocess help({testing_util::LedgerctlPath(), "--help"});
  EXPECT_EQ(help.WaitForExit(), 0);
  for (const char* flag :
       {"  --target=STRING  (default: localhost:50051)", "  --json  (default: false)",
        "  --deadline=DURATION  (default: 5s)", "--request_id", "--transfer_id", "--tls_ca_file",
        "--page_size", "--version", "Exit codes:", "transfer FROM TO AMOUNT [--transfer_id=ID]",
        "get-transfer ID", "apply FILE|- [--batch_size=N]",
        "  --batch_size=INT  (default: 1000)"}) {
    EXPECT_THAT(help.output(), HasSubstr(flag)) << flag;
  }
  EXPECT_THAT(help.output(), ::testing::Not(HasSubstr("Flags from")));
  Subprocess short_form({testing_util::LedgerctlPath(), "-h"});
  EXPECT_EQ(short_form.WaitForExit(), 0);
  EXPECT_EQ(short_form.output(), help.output());
  Subprocess version({testing_util::LedgerctlPath(), "--version"});
  EXPECT_EQ(version.WaitForExit(), 0);
  EXPECT_THAT(version.output(),
              ::testing::MatchesRegex("ledgerctl [0-9.]+ \\(commit ([0-9a-f]+|unknown), "
                                      "[A-Za-z_ ]+ build\\)\n"));
}

TEST(ExitCodeForTest, MapsEveryStatusCodeToItsClass) {
  EXPECT_EQ(ExitCodeFor(grpc::StatusCode::OK), kExitOk);
  for (auto code : {grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::FAILED_PRECONDITION,
                    grpc::StatusCode::OUT_OF_RANGE, grpc::StatusCode::ALREADY_EXISTS}) {
    EXPECT_EQ(ExitCodeFor(code), kExitRejected) << code;
  }
  EXPECT_EQ(ExitCodeFor(grpc::StatusCode::NOT_FOUND), kExitNotFound);
  for (auto code : {grpc::StatusCode::RESOURCE_EXHAUSTED, grpc::StatusCode::UNAVAILABLE,
                    grpc::StatusCode::DEADLINE_EXCEEDED}) {
    EXPECT_EQ(ExitCodeFor(code), kExitUnavailable) << code;
  }
  for (auto code : {grpc::StatusCode::INTERNAL, grpc::StatusCode::UNKNOWN,
                    grpc::StatusCode::CANCELLED, grpc::StatusCode::UNIMPLEMENTED,
                    grpc::StatusCode::DATA_LOSS, grpc::StatusCode::PERMISSION_DENIED}) {
    EXPECT_EQ(ExitCodeFor(code), kExitOther) << code;
  }
}

TEST(WorseExitCodeTest, OrdersTheClassesFromOkToOtherFailure) {
  // From least to most severe: 0, 4, 3, 5, 1 (apply exits with the worst of its results).
  const std::vector<ExitCode> ordered = {kExitOk, kExitNotFound, kExitRejected, kExitUnavailable,
                                         kExitOther};
  for (size_t i = 0; i < ordered.size(); ++i) {
    for (size_t j = 0; j < ordered.size(); ++j) {
      EXPECT_EQ(WorseExitCode(ordered[i], ordered[j]), ordered[std::max(i, j)]) << i << " " << j;
    }
  }
}

// The ledgerctl transcripts of docs/clients.md (the ```console blocks after "## ledgerctl") and of
// README.md (the block after "### With ledgerctl"), run command by command against a new ledger:
// each output must be what ledgerctl prints, but for the times and the request_ids that ledgerctl
// makes up, which differ on every run.
std::string WithoutRunSpecifics(std::string text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const bool is_time = text.size() - i >= 24 && text.compare(i, 2, "20") == 0 &&
                         text[i + 4] == '-' && text[i + 7] == '-' && text[i + 10] == 'T' &&
                         text.find('Z', i) != std::string::npos && text.find('Z', i) - i <= 30;
    if (is_time) {
      out += "<time>";
      i = text.find('Z', i) + 1;
    } else if (text.compare(i, 10, "ledgerctl-") == 0 && text.size() - i >= 26 &&
               text.find_first_not_of("0123456789abcdef", i + 10) - (i + 10) == 16) {
      out += "ledgerctl-<id>";
      i += 26;
    } else {
      out += text[i++];
    }
  }
  return out;
}

// The lines of the `index`-th ```console block (0: the first) after the line `heading` in the
// document at `path`, relative to the source tree.
std::vector<std::string> DocLedgerctlBlock(const std::string& path, const std::string& heading,
                                           int index) {
  std::ifstream file(testing_util::SourceDir() + "/" + path);
  const std::string readme{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  size_t end = readme.find("\n" + heading + "\n");
  EXPECT_NE(end, std::string::npos);
  size_t start = end;
  for (int block = 0; block <= index; ++block) {
    start = readme.find("```console\n", end);
    EXPECT_NE(start, std::string::npos);
    if (start == std::string::npos) return {};
    end = readme.find("```", start + 11);
  }
  return absl::StrSplit(readme.substr(start + 11, end - start - 11), '\n', absl::SkipEmpty());
}

// Runs one transcript block command by command through `run` (ledgerctl with the given
// arguments; the output without `target_flag`) and returns how many ledgerctl commands it ran.
// `cat FILE` is not run: its output is written to FILE in `files`, which later commands read.
// `last_exit_code` carries the last command's exit code across blocks, for `echo $?`.
int RunTranscriptBlock(const std::vector<std::string>& lines,
                       const std::function<Result(std::vector<std::string>)>& run,
                       const std::string& target_flag, testing_util::ScratchDir& files,
                       int& last_exit_code) {
  int commands = 0;
  for (size_t i = 0; i < lines.size();) {
    EXPECT_TRUE(absl::StartsWith(lines[i], "$ ")) << lines[i];
    if (!absl::StartsWith(lines[i], "$ ")) return commands;
    const std::string command = lines[i].substr(2);
    std::string expected;
    for (++i; i < lines.size() && !absl::StartsWith(lines[i], "$ "); ++i) {
      expected += lines[i] + "\n";
    }
    SCOPED_TRACE(command);
    if (command == "echo $?") {
      EXPECT_EQ(absl::StrCat(last_exit_code, "\n"), expected);
      continue;
    }
    if (absl::StartsWith(command, "cat ")) {
      std::ofstream(files.Sub(command.substr(4))) << expected;
      continue;
    }
    EXPECT_TRUE(absl::StartsWith(command, "ledgerctl ")) << command;
    if (!absl::StartsWith(command, "ledgerctl ")) return commands;
    std::vector<std::string> args = absl::StrSplit(command.substr(10), ' ', absl::SkipEmpty());
    for (std::string& arg : args) {
      if (absl::EndsWith(arg, ".jsonl")) arg = files.Sub(arg);  // A file `cat` wrote.
    }
    const Result result = run(args);
    last_exit_code = result.exit_code;
    // The documents' commands reach the default target and name the files as written there;
    // this run's carry --target and the scratch directory.
    const std::string output =
        absl::StrReplaceAll(result.output, {{target_flag + " ", ""}, {files.path() + "/", ""}});
    EXPECT_EQ(WithoutRunSpecifics(output), WithoutRunSpecifics(expected));
    ++commands;
  }
  return commands;
}

// docs/clients.md: the first block (deposits, withdrawals, history, errors), the second
// (transfers) and the third (apply), run one after the other against one ledgerd, as a reader
// would.
TEST_F(LedgerctlTest, TheClientsDocTranscriptIsWhatLedgerctlPrints) {
  // Handlers take 200 ms, so that the transcript's 100 ms deadlines always run out after the
  // call was sent: ledgerctl connects first, within the deadline, and a call that could not
  // connect in time was not sent at all.
  StartLedgerd({"--debug_handler_delay=200ms"});
  testing_util::ScratchDir files;
  int commands = 0;
  int last_exit_code = 0;
  for (int block = 0; block < 3; ++block) {
    SCOPED_TRACE(absl::StrCat("docs/clients.md ledgerctl block ", block));
    commands += RunTranscriptBlock(
        DocLedgerctlBlock("docs/clients.md", "## ledgerctl", block),
        [this](std::vector<std::string> args) { return Run(std::move(args)); }, target_, files,
        last_exit_code);
  }
  EXPECT_GE(commands, 19);
}

// README.md's quickstart: its one ledgerctl block, against a new ledger.
TEST_F(LedgerctlTest, TheReadmeQuickstartIsWhatLedgerctlPrints) {
  StartLedgerd({});
  testing_util::ScratchDir files;
  int last_exit_code = 0;
  const int commands = RunTranscriptBlock(
      DocLedgerctlBlock("README.md", "### With ledgerctl", 0),
      [this](std::vector<std::string> args) { return Run(std::move(args)); }, target_, files,
      last_exit_code);
  EXPECT_GE(commands, 3);
}

// Pushback (issue 14): the fake ledger sheds the first attempts of each call.

TEST_F(LedgerctlTest, AShedCallWithPushbackIsRetriedWithTheSameRequestIdUntilItSucceeds) {
  StartFakeLedger({.attempts_shed = 2, .pushback_ms = "20"});
  Result deposit = Run({"deposit", "alice", "1500", "--request_id=pay-1"});
  EXPECT_EQ(deposit.exit_code, kExitOk) << deposit.output;
  EXPECT_THAT(deposit.output,
              HasSubstr("ledgerctl: shed by the server; retrying in 20 ms (attempt 2 of 4)\n"));
  EXPECT_THAT(deposit.output,
              HasSubstr("ledgerctl: shed by the server; retrying in 20 ms (attempt 3 of 4)\n"));
  EXPECT_THAT(deposit.output, HasSubstr("alice: 1500\n"));
  EXPECT_THAT(fake_->request_ids(), ::testing::ElementsAre("pay-1", "pay-1", "pay-1"));
}

TEST_F(LedgerctlTest, AGeneratedRequestIdIsTheSameOnEveryRetry) {
  StartFakeLedger({.attempts_shed = 1, .pushback_ms = "0"});
  Result deposit = Run({"deposit", "bob", "7"}, /*stdout_only=*/true);
  EXPECT_EQ(deposit.exit_code, kExitOk);
  EXPECT_EQ(deposit.output, "bob: 7\n");
  const std::vector<std::string> ids = fake_->request_ids();
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_THAT(ids[0], ::testing::StartsWith("ledgerctl-"));
  EXPECT_EQ(ids[0], ids[1]);
}

TEST_F(LedgerctlTest, BalanceIsRetriedAfterPushbackToo) {
  StartFakeLedger({.attempts_shed = 1, .pushback_ms = "5"});
  ASSERT_EQ(Run({"deposit", "carol", "3"}).exit_code, kExitOk);  // Shed once, then applied.
  Result balance = Run({"balance", "carol"});
  EXPECT_EQ(balance.exit_code, kExitOk) << balance.output;
  EXPECT_THAT(balance.output, HasSubstr("retrying in 5 ms (attempt 2 of 4)"));
  EXPECT_THAT(balance.output, HasSubstr("carol: 3\n"));
  EXPECT_EQ(fake_->attempts(), 4);
}

TEST_F(LedgerctlTest, WithoutPushbackAShedCallIsNotRetried) {
  StartFakeLedger({.attempts_shed = 1, .pushback_ms = std::nullopt});
  Result deposit = Run({"deposit", "alice", "5"});
  EXPECT_EQ(deposit.exit_code, kExitUnavailable);
  EXPECT_THAT(deposit.output,
              HasSubstr("ledgerctl: RESOURCE_EXHAUSTED: fake: the shard could not take it"));
  EXPECT_THAT(deposit.output, Not(HasSubstr("retrying")));
  EXPECT_EQ(fake_->attempts(), 1);
}

// A status's words are for people; ledgerctl decides by its reason (ErrorInfo). The fake's words
// here say the opposite of the reason, and ledgerctl follows the reason.
TEST_F(LedgerctlTest, AnUnknownOutcomeIsReadFromTheReasonWhateverTheWordsSay) {
  StartFakeLedger({}, testing_util::FakeLedger::WriteFault{.code = grpc::StatusCode::UNAVAILABLE,
                                                           .reason = v1::OUTCOME_UNKNOWN,
                                                           .words = "nothing was applied",
                                                           .applied = true});
  Result deposit = Run({"deposit", "alice", "5", "--request_id=u-1"});
  EXPECT_EQ(deposit.exit_code, kExitUnavailable);
  EXPECT_THAT(deposit.output, HasSubstr("ledgerctl: UNAVAILABLE: nothing was applied\n"
                                        "ledgerctl: outcome unknown: the deposit may have been "
                                        "applied. Retry it exactly like this"));
  Result retry = Run({"deposit", "alice", "5", "--request_id=u-1"});
  EXPECT_EQ(retry.exit_code, kExitOk) << retry.output;
  EXPECT_THAT(retry.output, HasSubstr("alice: 5 (replayed"));
  EXPECT_EQ(Run({"balance", "alice"}).output, "alice: 5\n");
}

TEST_F(LedgerctlTest, ARefusalIsReadFromTheReasonWhateverTheWordsSay) {
  StartFakeLedger({},
                  testing_util::FakeLedger::WriteFault{.code = grpc::StatusCode::UNAVAILABLE,
                                                       .reason = v1::SHUTTING_DOWN,
                                                       .words = "outcome unknown: still pending",
                                                       .applied = false});
  Result deposit = Run({"deposit", "alice", "5"});
  EXPECT_EQ(deposit.exit_code, kExitUnavailable);
  EXPECT_EQ(deposit.output, "ledgerctl: UNAVAILABLE: outcome unknown: still pending\n");
  EXPECT_EQ(Run({"balance", "alice"}).output, "alice: 0\n");
}

TEST_F(LedgerctlTest, ANegativeOrMalformedPushbackMeansDoNotRetry) {
  for (const char* pushback : {"-1", "25ms"}) {
    StartFakeLedger({.attempts_shed = 1, .pushback_ms = pushback});
    Result deposit = Run({"deposit", "alice", "5"});
    EXPECT_EQ(deposit.exit_code, kExitUnavailable) << pushback;
    EXPECT_THAT(deposit.output, Not(HasSubstr("retrying"))) << pushback;
    EXPECT_EQ(fake_->attempts(), 1) << pushback;
  }
}

TEST_F(LedgerctlTest, RetriesZeroMakesOneAttempt) {
  StartFakeLedger({.attempts_shed = 1, .pushback_ms = "1"});
  Result deposit = Run({"--retries=0", "deposit", "alice", "5"});
  EXPECT_EQ(deposit.exit_code, kExitUnavailable);
  EXPECT_THAT(deposit.output,
              HasSubstr("ledgerctl: shed by the server; not retrying: --retries=0 (the server "
                        "asked to wait 1 ms)\n"));
  EXPECT_EQ(fake_->attempts(), 1);
}

TEST_F(LedgerctlTest, RetriesStopAfterTheLastAllowedAttempt) {
  StartFakeLedger({.attempts_shed = 100, .pushback_ms = "1"});
  Result deposit = Run({"--retries=2", "withdraw", "alice", "5"});
  EXPECT_EQ(deposit.exit_code, kExitUnavailable);
  EXPECT_THAT(deposit.output, HasSubstr("(attempt 3 of 3)"));
  EXPECT_THAT(deposit.output, HasSubstr("not retrying: all 3 attempts were shed"));
  EXPECT_EQ(fake_->attempts(), 3);
}

TEST_F(LedgerctlTest, APushbackPastTheDeadlineIsNotWaitedFor) {
  StartFakeLedger({.attempts_shed = 1, .pushback_ms = "60000"});
  Result deposit = Run({"--deadline=5s", "deposit", "alice", "5"});
  EXPECT_EQ(deposit.exit_code, kExitUnavailable);
  EXPECT_THAT(deposit.output, HasSubstr("not retrying: the server asked to wait 60000 ms, and "
                                        "--deadline leaves "));
  EXPECT_EQ(fake_->attempts(), 1);
}

TEST_F(LedgerctlTest, RetryNoticesAreJsonWithJson) {
  StartFakeLedger({.attempts_shed = 1, .pushback_ms = "2"});
  Result deposit = Run({"--json", "deposit", "alice", "5", "--request_id=j-1"});
  EXPECT_EQ(deposit.exit_code, kExitOk);
  EXPECT_THAT(deposit.output,
              HasSubstr("{\"shed\":true,\"note\":\"retrying in 2 ms (attempt 2 of 4)\","
                        "\"retry_in_ms\":\"2\",\"attempt\":2,\"attempts\":4}\n"));
}

TEST_F(LedgerctlTest, RetriesOutOfRangeIsAUsageError) {
  EXPECT_EQ(Run({"--retries=11", "balance", "alice"}).exit_code, kExitUsage);
  EXPECT_EQ(Run({"--retries=-1", "balance", "alice"}).exit_code, kExitUsage);
}

// Transfers (issue 15), against the fake ledger: its Transfer and GetTransfer keep the contract,
// and it can leave a transfer's outcome unknown to its caller as the real server can.

class LedgerctlTransferTest : public LedgerctlTest {
 protected:
  void StartFake(testing_util::FakeLedger::Shedding shedding = {}) {
    StartFakeLedger(std::move(shedding));
    fake_->SetBalance("alice", 1000);
    fake_->SetBalance("bob", 0);
  }
  // The balances, as ledgerctl reads them.
  std::string Balances() {
    return Run({"balance", "alice"}, /*stdout_only=*/true).output +
           Run({"balance", "bob"}, /*stdout_only=*/true).output;
  }
};

TEST_F(LedgerctlTransferTest, ATransferPrintsBothBalancesAfterIt) {
  StartFake();
  Result transfer = Run({"transfer", "alice", "bob", "300", "--transfer_id=t-1"});
  EXPECT_EQ(transfer.exit_code, kExitOk) << transfer.output;
  EXPECT_EQ(transfer.output, "alice: 700\nbob: 300\n");
  EXPECT_EQ(Balances(), "alice: 700\nbob: 300\n");
}

TEST_F(LedgerctlTransferTest, ARetriedTransferIdIsReplayedAndMovesNothing) {
  StartFake();
  ASSERT_EQ(Run({"transfer", "alice", "bob", "300", "--transfer_id=t-1"}).exit_code, kExitOk);
  Result again = Run({"transfer", "alice", "bob", "300", "--transfer_id=t-1"});
  EXPECT_EQ(again.exit_code, kExitOk);
  EXPECT_EQ(again.output,
            "alice: 700\nbob: 300\n(replayed: the recorded result of an earlier transfer with "
            "transfer_id t-1; nothing was moved now, and the balances may have changed since)\n");
  Result reused = Run({"transfer", "alice", "bob", "5", "--transfer_id=t-1"});
  EXPECT_EQ(reused.exit_code, kExitRejected);
  EXPECT_THAT(reused.output, HasSubstr("ledgerctl: ALREADY_EXISTS: "));
  EXPECT_EQ(Balances(), "alice: 700\nbob: 300\n");
}

TEST_F(LedgerctlTransferTest, JsonCarriesTheTransferIdAndBothBalances) {
  StartFake();
  EXPECT_EQ(Run({"--json", "transfer", "alice", "bob", "250", "--transfer_id=j-1"}, true).output,
            "{\"transfer_id\":\"j-1\",\"from_account_id\":\"alice\",\"from_balance\":\"750\","
            "\"to_account_id\":\"bob\",\"to_balance\":\"250\",\"replayed\":false}\n");
}

TEST_F(LedgerctlTransferTest, ARefusedTransferExitsThreeAndMovesNothing) {
  StartFake();
  Result refused = Run({"transfer", "alice", "bob", "5000", "--transfer_id=t-big"});
  EXPECT_EQ(refused.exit_code, kExitRejected);
  EXPECT_EQ(refused.output, "ledgerctl: FAILED_PRECONDITION: insufficient funds\n");
  Result unknown_account = Run({"transfer", "alice", "nobody", "5"});
  EXPECT_EQ(unknown_account.exit_code, kExitNotFound);
  EXPECT_EQ(Balances(), "alice: 1000\nbob: 0\n");
  // get-transfer reads the refusal back.
  Result state = Run({"get-transfer", "t-big"});
  EXPECT_EQ(state.exit_code, kExitOk);
  EXPECT_THAT(state.output,
              ::testing::MatchesRegex(
                  "transfer_id: t-big\n"
                  "state:       REFUSED: no money moved \\(a debit, if any, was refunded\\)\n"
                  "refused:     FAILED_PRECONDITION: insufficient funds\n"
                  "from:        alice\nto:          bob\namount:      5000\n"
                  "created:     20[0-9-]+T[0-9:.]+Z\nfinished:    20[0-9-]+T[0-9:.]+Z\n"));
  EXPECT_THAT(
      Run({"--json", "get-transfer", "t-big"}, true).output,
      ::testing::MatchesRegex(
          "\\{\"transfer_id\":\"t-big\",\"state\":\"REFUSED\",\"from_account_id\":\"alice\","
          "\"to_account_id\":\"bob\",\"amount\":\"5000\",\"refusal_code\":"
          "\"FAILED_PRECONDITION\",\"refusal_message\":\"insufficient funds\","
          "\"created_time\":\"[0-9TZ:.-]+\",\"finished_time\":\"[0-9TZ:.-]+\"\\}\n"));
}

TEST_F(LedgerctlTransferTest, GetTransferPrintsACommittedTransfer) {
  StartFake();
  ASSERT_EQ(Run({"transfer", "alice", "bob", "300", "--transfer_id=t-1"}).exit_code, kExitOk);
  Result state = Run({"get-transfer", "t-1"});
  EXPECT_EQ(state.exit_code, kExitOk);
  EXPECT_THAT(state.output,
              ::testing::MatchesRegex("transfer_id: t-1\n"
                                      "state:       COMMITTED: both sides applied and durable\n"
                                      "from:        alice \\(balance after the debit 700\\)\n"
                                      "to:          bob \\(balance after the credit 300\\)\n"
                                      "amount:      300\ncreated:     [0-9TZ:.-]+\n"
                                      "credited:    [0-9TZ:.-]+\nfinished:    [0-9TZ:.-]+\n"));
  EXPECT_THAT(Run({"--json", "get-transfer", "t-1"}, true).output,
              HasSubstr("\"state\":\"COMMITTED\",\"from_account_id\":\"alice\",\"to_account_id\":"
                        "\"bob\",\"amount\":\"300\",\"from_balance\":\"700\",\"to_balance\":"
                        "\"300\""));
}

TEST_F(LedgerctlTransferTest, GetTransferOfAnUnknownIdIsNotFoundAndWithoutRecordsRefused) {
  StartFake();
  Result missing = Run({"get-transfer", "never"});
  EXPECT_EQ(missing.exit_code, kExitNotFound);
  EXPECT_THAT(missing.output, HasSubstr("ledgerctl: NOT_FOUND: transfer never not found"));
  StartFake({.no_transfer_records = true});
  Result none = Run({"get-transfer", "never"});
  EXPECT_EQ(none.exit_code, kExitRejected);
  EXPECT_THAT(none.output, HasSubstr("ledgerctl: FAILED_PRECONDITION: "));
}

TEST_F(LedgerctlTransferTest, AnUnknownOutcomeSaysHowToSettleItAndBothWaysMoveTheMoneyOnce) {
  StartFake({.first_transfer_endings = {
                 testing_util::FakeLedger::TransferEnding::kDecideThenUnavailable}});
  // No --transfer_id: ledgerctl makes one up and prints it in both commands.
  Result lost = Run({"transfer", "alice", "bob", "300"});
  EXPECT_EQ(lost.exit_code, kExitUnavailable);
  const size_t at = lost.output.find("get-transfer ledgerctl-");
  ASSERT_NE(at, std::string::npos) << lost.output;
  const std::string id = lost.output.substr(at + 13, 26);  // "ledgerctl-" + 16 hex.
  EXPECT_EQ(lost.output,
            "ledgerctl: UNAVAILABLE: fake: connection lost after the transfer\n"
            "ledgerctl: outcome unknown: the transfer may have been applied. Find out with:\n"
            "  ledgerctl " +
                target_ + " get-transfer " + id +
                "\n"
                "or retry it exactly like this, which moves the money at most once:\n"
                "  ledgerctl " +
                target_ + " transfer alice bob 300 --transfer_id=" + id + "\n");
  // Settled by asking...
  EXPECT_THAT(Run({"get-transfer", id}).output, HasSubstr("state:       COMMITTED"));
  // ... or by retrying: a replay, not a second transfer.
  Result retry = Run({"transfer", "alice", "bob", "300", "--transfer_id=" + id});
  EXPECT_EQ(retry.exit_code, kExitOk);
  EXPECT_THAT(retry.output, HasSubstr("(replayed: "));
  EXPECT_EQ(Balances(), "alice: 700\nbob: 300\n");
}

TEST_F(LedgerctlTransferTest, AStillPendingTransferSaysItEndsOnItsOwn) {
  StartFake({.first_transfer_endings =
                 {testing_util::FakeLedger::TransferEnding::kPendingThenUnavailable},
             .get_transfer_pending = 1});
  Result pending = Run({"transfer", "alice", "bob", "40", "--transfer_id=p-1"});
  EXPECT_EQ(pending.exit_code, kExitUnavailable);
  EXPECT_THAT(pending.output,
              HasSubstr("ledgerctl: the transfer is still pending: debited from alice, its credit "
                        "to bob not yet confirmed; it ends COMMITTED or REFUSED on its own. See "
                        "how with:\n  ledgerctl " +
                        target_ + " get-transfer p-1\n"));
  EXPECT_THAT(pending.output, Not(HasSubstr("retry it")));
  Result first = Run({"get-transfer", "p-1"});
  EXPECT_EQ(first.exit_code, kExitOk);
  EXPECT_THAT(first.output,
              HasSubstr("state:       PENDING: debited, the credit not yet confirmed"));
  EXPECT_THAT(first.output, HasSubstr("from:        alice (balance after the debit 960)\n"));
  EXPECT_THAT(Run({"get-transfer", "p-1"}).output, HasSubstr("state:       COMMITTED"));
  EXPECT_EQ(Balances(), "alice: 960\nbob: 40\n");
}

TEST_F(LedgerctlTransferTest, AShedTransferIsRetriedWithTheSameGeneratedTransferId) {
  StartFake({.attempts_shed = 2, .pushback_ms = "5"});
  Result transfer = Run({"transfer", "alice", "bob", "10"});
  EXPECT_EQ(transfer.exit_code, kExitOk) << transfer.output;
  EXPECT_THAT(transfer.output, HasSubstr("retrying in 5 ms (attempt 3 of 4)"));
  const std::vector<std::string> ids = fake_->request_ids();
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_THAT(ids[0], ::testing::StartsWith("ledgerctl-"));
  EXPECT_THAT(ids, ::testing::Each(ids[0]));
  Result shed_read = Run({"get-transfer", ids[0]});  // Shed twice too, then read.
  EXPECT_EQ(shed_read.exit_code, kExitOk) << shed_read.output;
  EXPECT_EQ(Balances(), "alice: 990\nbob: 10\n");
}

TEST_F(LedgerctlTransferTest, HistoryShowsEachSideWithItsTransferIdAndTheOtherAccount) {
  StartFakeLedger({});
  ASSERT_EQ(Run({"deposit", "alice", "1000", "--request_id=d-1"}).exit_code, kExitOk);
  ASSERT_EQ(Run({"deposit", "bob", "5", "--request_id=d-2"}).exit_code, kExitOk);
  ASSERT_EQ(Run({"transfer", "alice", "bob", "300", "--transfer_id=t-1"}).exit_code, kExitOk);
  EXPECT_THAT(Run({"history", "alice"}).output,
              ::testing::MatchesRegex(
                  "SEQ    TIME \\(UTC\\)               OPERATION             AMOUNT  BALANCE "
                  "AFTER  REQUEST ID \\(TRANSFER ID AND ACCOUNT\\)\n"
                  "2      20[0-9TZ:.-]+ transfer_out             300            700  t-1 to bob\n"
                  "1      20[0-9TZ:.-]+ deposit                 1000           1000  d-1\n"));
  EXPECT_THAT(Run({"history", "bob"}).output,
              HasSubstr(" transfer_in              300            305  t-1 from alice\n"));
  EXPECT_THAT(Run({"--json", "history", "bob"}, true).output,
              HasSubstr("\"operation\":\"transfer_in\",\"amount\":\"300\",\"balance_after\":"
                        "\"305\",\"request_id\":\"\",\"time\":\""));
  EXPECT_THAT(Run({"--json", "history", "bob"}, true).output,
              HasSubstr("\"transfer_id\":\"t-1\",\"counterparty_account_id\":\"alice\"}"));
}

TEST_F(LedgerctlTransferTest, TransferIdFlagsBelongToTheirCommands) {
  StartFake();
  for (const std::vector<std::string>& usage :
       {std::vector<std::string>{"transfer", "alice", "bob"},
        {"transfer", "alice", "bob", "5", "--request_id=r"},
        {"get-transfer"},
        {"get-transfer", "a", "b"},
        {"get-transfer", "t-1", "--transfer_id=t-1"},
        {"deposit", "alice", "5", "--transfer_id=t-1"}}) {
    Result result = Run(usage);
    EXPECT_EQ(result.exit_code, kExitUsage) << result.output;
    EXPECT_THAT(result.output, HasSubstr("ledgerctl --help"));
  }
  EXPECT_THAT(Run({"get-transfer", "t-1", "--transfer_id=t-1"}).output,
              HasSubstr("get-transfer takes the id as its argument"));
  EXPECT_EQ(fake_->attempts(), 0);  // Nothing was sent.
}

}  // namespace
}  // namespace ledger
