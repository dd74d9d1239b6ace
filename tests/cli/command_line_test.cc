// ParseArguments and its helpers, on flags defined in this file (as a binary's main file does).
#include "cli/command_line.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(absl::Duration, test_deadline, absl::Seconds(5), "how long to wait");
ABSL_FLAG(bool, test_json, false, "print JSON");
ABSL_FLAG(int32_t, test_count, 1, "how many");
ABSL_FLAG(std::string, test_target, "localhost:1", "where to");

namespace ledger::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using Action = ParsedCommandLine::Action;

const ProgramSpec& Spec() {
  static const ProgramSpec* spec = new ProgramSpec{"tester", __FILE__, "tests things."};
  return *spec;
}

class ParseArgumentsTest : public testing::Test {
 protected:
  void SetUp() override {
    absl::SetFlag(&FLAGS_test_deadline, absl::Seconds(5));
    absl::SetFlag(&FLAGS_test_json, false);
    absl::SetFlag(&FLAGS_test_count, 1);
    absl::SetFlag(&FLAGS_test_target, "localhost:1");
  }
  ParsedCommandLine Parse(std::vector<std::string> args) { return ParseArguments(args, Spec()); }
};

TEST_F(ParseArgumentsTest, SetsFlagsInEveryFormAndKeepsPositionalsInOrder) {
  ParsedCommandLine parsed = Parse({"deposit", "--test_deadline=2s", "alice", "-test_json",
                                    "--test_count", "7", "5", "--test_target=x:2"});
  EXPECT_EQ(parsed.action, Action::kRun) << parsed.error;
  EXPECT_THAT(parsed.positional, ElementsAre("deposit", "alice", "5"));
  EXPECT_EQ(absl::GetFlag(FLAGS_test_deadline), absl::Seconds(2));
  EXPECT_TRUE(absl::GetFlag(FLAGS_test_json));
  EXPECT_EQ(absl::GetFlag(FLAGS_test_count), 7);
  EXPECT_EQ(absl::GetFlag(FLAGS_test_target), "x:2");
}

TEST_F(ParseArgumentsTest, NoPrefixTurnsABooleanOff) {
  absl::SetFlag(&FLAGS_test_json, true);
  EXPECT_EQ(Parse({"--notest_json"}).action, Action::kRun);
  EXPECT_FALSE(absl::GetFlag(FLAGS_test_json));
}

TEST_F(ParseArgumentsTest, NegativeNumbersAndEverythingAfterDoubleDashArePositional) {
  ParsedCommandLine parsed = Parse({"deposit", "alice", "-5", "--", "--test_json", "-x"});
  EXPECT_EQ(parsed.action, Action::kRun) << parsed.error;
  EXPECT_THAT(parsed.positional, ElementsAre("deposit", "alice", "-5", "--test_json", "-x"));
  EXPECT_FALSE(absl::GetFlag(FLAGS_test_json));
}

TEST_F(ParseArgumentsTest, HelpVersionAndTheirShortForms) {
  EXPECT_EQ(Parse({"--help"}).action, Action::kHelp);
  EXPECT_EQ(Parse({"-h"}).action, Action::kHelp);
  EXPECT_EQ(Parse({"x", "--helpfull"}).action, Action::kHelpFull);
  EXPECT_EQ(Parse({"--version"}).action, Action::kVersion);
}

struct ErrorCase {
  std::vector<std::string> args;
  std::string error;
};

class ParseErrorTest : public testing::TestWithParam<ErrorCase> {};

TEST_P(ParseErrorTest, SaysWhatWasWrongWithAHint) {
  ParsedCommandLine parsed = ParseArguments(GetParam().args, Spec());
  EXPECT_EQ(parsed.action, Action::kError);
  EXPECT_EQ(parsed.error, GetParam().error);
}

INSTANTIATE_TEST_SUITE_P(
    Errors, ParseErrorTest,
    testing::Values(
        ErrorCase{{"--test_deadline=5"},
                  "Illegal value '5' specified for flag 'test_deadline'; durations need a unit, "
                  "e.g. 5s, 250ms or 1m30s"},
        ErrorCase{{"--test_count=ten"},
                  "Illegal value 'ten' specified for flag 'test_count'; an integer is needed"},
        ErrorCase{{"--test_json=maybe"},
                  "Illegal value 'maybe' specified for flag 'test_json'; use true or false"},
        ErrorCase{{"--test_deadlne=5s"},
                  "Unknown command line flag 'test_deadlne'; did you mean --test_deadline?"},
        ErrorCase{{"--zzz"}, "Unknown command line flag 'zzz'"},
        ErrorCase{{"--test_count"}, "Missing the value for flag 'test_count'"}));

TEST(HelpTextTest, ListsOnlyTheMainFilesFlagsWithoutTheBuildPath) {
  const std::string help = HelpText(Spec(), /*all=*/false);
  EXPECT_THAT(help, HasSubstr("tester: tests things.\n\nFlags:\n"));
  EXPECT_THAT(help,
              HasSubstr("  --test_deadline=DURATION  (default: 5s)\n      how long to wait\n"));
  EXPECT_THAT(help, HasSubstr("  --test_json  (default: false)\n"));
  EXPECT_THAT(help, HasSubstr("  --help, -h\n"));
  EXPECT_THAT(help, Not(HasSubstr("Flags from")));
  EXPECT_THAT(help, Not(HasSubstr("No flags matched")));
  EXPECT_THAT(help, Not(HasSubstr("--flagfile")));  // absl's own flags: only with --helpfull.
}

TEST(VersionTextTest, NamesVersionCommitAndBuildType) {
  EXPECT_THAT(
      VersionText("tester"),
      testing::MatchesRegex("tester [0-9]+\\.[0-9]+\\.[0-9]+ \\(commit ([0-9a-f]+|unknown), "
                            "[A-Za-z_ ]+ build\\)"));
}

TEST(DidYouMeanTest, SuggestsOnlyCloseWords) {
  const std::vector<std::string> commands = {"deposit", "withdraw", "balance", "history", "health"};
  EXPECT_EQ(DidYouMean("depsit", commands), "deposit");
  EXPECT_EQ(DidYouMean("withdraww", commands), "withdraw");
  EXPECT_EQ(DidYouMean("helth", commands), "health");
  EXPECT_EQ(DidYouMean("frobnicate", commands), std::nullopt);
  EXPECT_EQ(DidYouMean("x", commands), std::nullopt);
}

}  // namespace
}  // namespace ledger::cli
