#include "storage/data_directory_swap.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "base/sync_directory.h"

namespace ledger::storage {
namespace {

namespace fs = std::filesystem;

absl::Status Failed(absl::string_view what, const std::error_code& error) {
  return absl::UnavailableError(
      absl::StrCat("swapping in the new data directory contents: ", what, ": ", error.message()));
}

bool Kept(const std::string& name, const std::vector<std::string>& keep) {
  return std::find(keep.begin(), keep.end(), name) != keep.end() || name == kSwapReadyDirectory ||
         name == kSwapMovingDirectory || name == kSwapReplacedDirectory;
}

// Moves every entry of `from` into `to` (`to` made if missing).
absl::Status MoveEntries(const fs::path& from, const fs::path& to,
                         const std::vector<std::string>& keep) {
  std::error_code error;
  fs::create_directories(to, error);
  if (error) return Failed(absl::StrCat("cannot make ", to.string()), error);
  std::vector<fs::path> entries;
  for (const fs::directory_entry& entry : fs::directory_iterator(from, error)) {
    if (!Kept(entry.path().filename().string(), keep)) entries.push_back(entry.path());
  }
  if (error) return Failed(absl::StrCat("cannot list ", from.string()), error);
  for (const fs::path& entry : entries) {
    fs::rename(entry, to / entry.filename(), error);
    if (error) {
      return Failed(absl::StrCat("cannot move ", entry.string(), " into ", to.string()), error);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SwapDataDirectoryContents(const std::string& data_dir, const std::string& staged,
                                       const std::vector<std::string>& keep) {
  const fs::path dir(data_dir);
  std::error_code error;
  fs::remove_all(dir / kSwapReplacedDirectory, error);
  fs::rename(staged, dir / kSwapReadyDirectory, error);
  if (error) return Failed(absl::StrCat("cannot move ", staged, " into place"), error);
  if (absl::Status synced = SyncDirectory(data_dir); !synced.ok()) return synced;
  // Past the point of no return: from here on the next open finishes what this does not.
  return FinishDataDirectorySwap(data_dir, keep);
}

absl::Status FinishDataDirectorySwap(const std::string& data_dir,
                                     const std::vector<std::string>& keep) {
  const fs::path dir(data_dir);
  std::error_code error;
  if (fs::exists(dir / kSwapReadyDirectory, error)) {
    // The old contents go aside, all of them, before any new entry comes in.
    if (absl::Status moved = MoveEntries(dir, dir / kSwapReplacedDirectory, keep); !moved.ok()) {
      return moved;
    }
    if (absl::Status synced = SyncDirectory(data_dir); !synced.ok()) return synced;
    fs::rename(dir / kSwapReadyDirectory, dir / kSwapMovingDirectory, error);
    if (error) return Failed("cannot mark the old contents moved aside", error);
    if (absl::Status synced = SyncDirectory(data_dir); !synced.ok()) return synced;
  }
  if (fs::exists(dir / kSwapMovingDirectory, error)) {
    // Nothing in the new contents is kept from the old: all of it moves up.
    if (absl::Status moved = MoveEntries(dir / kSwapMovingDirectory, dir, {}); !moved.ok()) {
      return moved;
    }
    if (absl::Status synced = SyncDirectory(data_dir); !synced.ok()) return synced;
    fs::remove(dir / kSwapMovingDirectory, error);
    if (error) return Failed("cannot remove the emptied new contents' directory", error);
  }
  if (!fs::exists(dir / kSwapReplacedDirectory, error)) return absl::OkStatus();
  fs::remove_all(dir / kSwapReplacedDirectory, error);
  if (error) return Failed("cannot remove the old contents", error);
  return SyncDirectory(data_dir);
}

}  // namespace ledger::storage
