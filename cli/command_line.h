// Defines how ledgerd, ledgerctl and ledger-loadtest read their command line, so that all three
// answer a wrong one the same way: `--help`/`-h` list the binary's own flags and exit 0,
// `--version` prints the version, commit and build type and exits 0, and a flag error, an
// unknown command or a stray argument prints what was wrong with a hint and exits 2.
//
// The flags stay defined (ABSL_FLAG) in each binary's main file; the parser finds them through
// absl's flag registry and lists in --help only those defined in that file.
#ifndef LEDGER_CLI_COMMAND_LINE_H_
#define LEDGER_CLI_COMMAND_LINE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ledger::cli {

// Exit status of a command line that is wrong: nothing was done.
inline constexpr int kExitUsage = 2;

// What a binary tells the parser about itself.
struct ProgramSpec {
  std::string name;       // "ledgerctl": prefixes every message.
  std::string main_file;  // __FILE__ of the file that defines the binary's flags.
  std::string usage;      // What --help prints above the flags.
  // __FILE__ of other files whose flags are the binary's own too (e.g. flags two binaries share).
  std::vector<std::string> shared_flag_files = {};
};

// The outcome of reading argv, before anything is printed.
struct ParsedCommandLine {
  enum class Action { kRun, kHelp, kHelpFull, kVersion, kError };
  Action action = Action::kRun;
  std::vector<std::string> positional;  // Without argv[0].
  std::string error;                    // For kError: absl's message plus a hint.
};

// Sets the flags named in `args` (argv without argv[0]) and collects the other arguments.
// Accepts --name=value, --name value (not for bools), --name and --noname (bools), one or two
// dashes; `--` ends the flags; an argument that looks like a negative number ("-5") is
// positional, so that `deposit alice -5` reaches the command's own check.
ParsedCommandLine ParseArguments(absl::Span<const std::string> args, const ProgramSpec& spec);

// ParseArguments on argv, and acts on it: prints --help or --version and exits 0, prints an
// error and exits kExitUsage. Returns the positional arguments otherwise.
std::vector<std::string> ParseCommandLineOrExit(int argc, char** argv, const ProgramSpec& spec);

// Prints "NAME: problem" and a pointer to --help on stderr, and exits kExitUsage.
[[noreturn]] void ExitUsage(const ProgramSpec& spec, absl::string_view problem);

// The --help text: the usage, then the flags defined in spec.main_file and
// spec.shared_flag_files (all flags if `all`).
std::string HelpText(const ProgramSpec& spec, bool all);

// "NAME VERSION (commit COMMIT, BUILD_TYPE build)".
std::string VersionText(absl::string_view name);

// The candidate closest to `word` when it is close enough to be a typo (at most 2 edits, and
// fewer than half of the word's letters), else nullopt.
std::optional<std::string> DidYouMean(absl::string_view word,
                                      absl::Span<const std::string> candidates);

}  // namespace ledger::cli

#endif  // LEDGER_CLI_COMMAND_LINE_H_
