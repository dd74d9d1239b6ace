#include "cli/command_line.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"

#ifndef LEDGER_VERSION
#define LEDGER_VERSION "unknown"
#endif
#ifndef LEDGER_GIT_COMMIT
#define LEDGER_GIT_COMMIT "unknown"
#endif
#ifndef LEDGER_BUILD_TYPE
#define LEDGER_BUILD_TYPE ""
#endif

namespace ledger::cli {
namespace {

using Action = ParsedCommandLine::Action;

absl::string_view Basename(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

bool DefinedIn(const absl::CommandLineFlag& flag, const ProgramSpec& spec) {
  const std::string path = flag.Filename();  // By value: the view below must not outlive it.
  const absl::string_view file = Basename(path);
  if (file == Basename(spec.main_file)) return true;
  for (const std::string& shared : spec.shared_flag_files) {
    if (file == Basename(shared)) return true;
  }
  return false;
}

// The binary's own flags, by name.
std::map<std::string, absl::CommandLineFlag*> OwnFlags(const ProgramSpec& spec, bool all) {
  std::map<std::string, absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (flag->IsRetired() || (!all && !DefinedIn(*flag, spec))) continue;
    flags.emplace(std::string(name), flag);
  }
  return flags;
}

bool LooksLikeNegativeNumber(absl::string_view arg) {
  return arg.size() >= 2 && arg[0] == '-' && (absl::ascii_isdigit(arg[1]) || arg[1] == '.');
}

// Why a value did not parse, in words that show the right spelling.
std::string ValueHint(const absl::CommandLineFlag& flag) {
  if (flag.IsOfType<absl::Duration>()) return "durations need a unit, e.g. 5s, 250ms or 1m30s";
  if (flag.IsOfType<bool>()) return "use true or false";
  if (flag.IsOfType<int32_t>() || flag.IsOfType<int64_t>()) return "an integer is needed";
  if (flag.IsOfType<double>()) return "a number is needed";
  return "";
}

ParsedCommandLine Error(std::string message) {
  ParsedCommandLine result;
  result.action = Action::kError;
  result.error = std::move(message);
  return result;
}

std::string UnknownFlag(absl::string_view name, const ProgramSpec& spec) {
  std::vector<std::string> names;
  for (const auto& [own, flag] : OwnFlags(spec, false)) names.push_back(own);
  std::string message = absl::StrCat("Unknown command line flag '", name, "'");
  if (std::optional<std::string> close = DidYouMean(name, names)) {
    absl::StrAppend(&message, "; did you mean --", *close, "?");
  }
  return message;
}

// Sets one flag from `--name[=value]` (dashes stripped); `next` is the argument after it, which
// is consumed as the value of a non-boolean flag written without '='. Returns an error or "".
std::string SetFlag(absl::string_view body, absl::Span<const std::string> rest, size_t& index,
                    const ProgramSpec& spec) {
  const size_t equals = body.find('=');
  absl::string_view name = body.substr(0, equals);
  std::optional<std::string> value;
  if (equals != absl::string_view::npos) value = std::string(body.substr(equals + 1));
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr && absl::StartsWith(name, "no") && !value.has_value()) {
    absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
    if (negated != nullptr && negated->IsOfType<bool>()) {
      flag = negated;
      name = name.substr(2);
      value = "false";
    }
  }
  if (flag == nullptr || flag->IsRetired()) return UnknownFlag(name, spec);
  if (!value.has_value()) {
    if (flag->IsOfType<bool>()) {
      value = "true";
    } else if (index + 1 < rest.size()) {
      value = rest[++index];
    } else {
      return absl::StrCat("Missing the value for flag '", name, "'");
    }
  }
  std::string error;
  if (!flag->ParseFrom(*value, &error)) {
    // absl's own message ("Illegal value '5' specified for flag 'deadline'"), or the same words.
    std::string message =
        error.empty() ? absl::StrCat("Illegal value '", *value, "' specified for flag '", name, "'")
                      : error;
    if (const std::string hint = ValueHint(*flag); !hint.empty()) {
      absl::StrAppend(&message, "; ", hint);
    }
    return message;
  }
  return "";
}

// "  --name=TYPE (default: X)\n      help, wrapped\n"
std::string FlagHelp(const absl::CommandLineFlag& flag) {
  const char* type = flag.IsOfType<bool>()                                  ? ""
                     : flag.IsOfType<absl::Duration>()                      ? "=DURATION"
                     : flag.IsOfType<int32_t>() || flag.IsOfType<int64_t>() ? "=INT"
                     : flag.IsOfType<double>()                              ? "=NUMBER"
                                                                            : "=STRING";
  const std::string default_value = flag.DefaultValue();
  std::string out =
      absl::StrCat("  --", flag.Name(), type,
                   "  (default: ", default_value.empty() ? "\"\"" : default_value, ")\n");
  std::string line = "     ";
  for (absl::string_view word : absl::StrSplit(flag.Help(), ' ', absl::SkipEmpty())) {
    if (line.size() + 1 + word.size() > 96 && line.size() > 5) {
      absl::StrAppend(&out, line, "\n");
      line = "     ";
    }
    absl::StrAppend(&line, " ", word);
  }
  absl::StrAppend(&out, line, "\n");
  return out;
}

size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

ParsedCommandLine ParseArguments(absl::Span<const std::string> args, const ProgramSpec& spec) {
  ParsedCommandLine result;
  bool flags_ended = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (flags_ended || arg.size() < 2 || arg[0] != '-' || LooksLikeNegativeNumber(arg)) {
      result.positional.push_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_ended = true;
      continue;
    }
    const absl::string_view body =
        absl::string_view(arg).substr(absl::StartsWith(arg, "--") ? 2 : 1);
    if (body == "help" || body == "h" || body == "helpshort") {
      result.action = Action::kHelp;
      return result;
    }
    if (body == "helpfull") {
      result.action = Action::kHelpFull;
      return result;
    }
    if (body == "version") {
      result.action = Action::kVersion;
      return result;
    }
    if (std::string error = SetFlag(body, args, i, spec); !error.empty()) return Error(error);
  }
  return result;
}

std::vector<std::string> ParseCommandLineOrExit(int argc, char** argv, const ProgramSpec& spec) {
  const std::vector<std::string> args(argv + std::min(argc, 1), argv + argc);
  ParsedCommandLine parsed = ParseArguments(args, spec);
  switch (parsed.action) {
    case Action::kRun:
      return std::move(parsed.positional);
    case Action::kHelp:
    case Action::kHelpFull:
      std::cout << HelpText(spec, parsed.action == Action::kHelpFull);
      std::exit(EXIT_SUCCESS);
    case Action::kVersion:
      std::cout << VersionText(spec.name) << "\n";
      std::exit(EXIT_SUCCESS);
    case Action::kError:
      ExitUsage(spec, parsed.error);
  }
  ExitUsage(spec, "unreadable command line");
}

void ExitUsage(const ProgramSpec& spec, absl::string_view problem) {
  std::cerr << spec.name << ": " << problem << "\n`" << spec.name
            << " --help` explains the usage and every flag\n";
  std::exit(kExitUsage);
}

std::string HelpText(const ProgramSpec& spec, bool all) {
  std::string out = absl::StrCat(spec.name, ": ", spec.usage, "\n\nFlags:\n");
  for (const auto& [name, flag] : OwnFlags(spec, all)) absl::StrAppend(&out, FlagHelp(*flag));
  absl::StrAppend(&out,
                  "  --help, -h\n      print this help and exit\n"
                  "  --helpfull\n      also list the flags of the libraries\n"
                  "  --version\n      print the version, git commit and build type, and exit\n");
  return out;
}

std::string VersionText(absl::string_view name) {
  const absl::string_view build_type = LEDGER_BUILD_TYPE;
  return absl::StrCat(name, " ", LEDGER_VERSION, " (commit ", LEDGER_GIT_COMMIT, ", ",
                      build_type.empty() ? "no CMAKE_BUILD_TYPE" : build_type, " build)");
}

std::optional<std::string> DidYouMean(absl::string_view word,
                                      absl::Span<const std::string> candidates) {
  std::optional<std::string> best;
  size_t best_distance = 3;
  for (const std::string& candidate : candidates) {
    const size_t distance = EditDistance(word, candidate);
    if (distance < best_distance && 2 * distance < std::max(word.size(), candidate.size())) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

}  // namespace ledger::cli
