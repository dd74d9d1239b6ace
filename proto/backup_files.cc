#include "proto/backup_files.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ledger {
namespace {

constexpr size_t kMaxComponentBytes = 128;

bool SafeComponent(absl::string_view part) {
  if (part.empty() || part.size() > kMaxComponentBytes || part == "." || part == "..") {
    return false;
  }
  for (const char c : part) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::Status CheckBackupPath(absl::string_view path) {
  const std::vector<absl::string_view> parts = absl::StrSplit(path, '/');
  bool safe = parts.size() <= 2 && path != kBackupManifestFile;
  for (const absl::string_view part : parts) safe = safe && SafeComponent(part);
  if (safe) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("\"", absl::CEscape(path.substr(0, 200)),
                   "\" is not a file a backup may hold (one or two path components of letters, "
                   "digits, '.', '_' and '-')"));
}

}  // namespace ledger
