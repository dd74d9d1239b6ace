// Defines how a data directory's contents are replaced by another data directory's in one step
// that a crash cannot leave half done: a cluster replica behind the leader's snapshot takes the
// leader's state this way (server/state_transfer.h).
//
// Everything happens inside the data directory, never beside it, so that a data directory that
// is a mount point (its own volume, as deployments give it) works: a rename cannot cross
// filesystems, and a mount point cannot be renamed.
//
//   1. The new contents are made in a directory inside the data directory (`staged`).
//   2. SwapDataDirectoryContents renames it to kSwapReadyDirectory: the point of no return. Then
//      every entry of the data directory but those kept (libraft's directory) goes into
//      kSwapReplacedDirectory; kSwapReadyDirectory becomes kSwapMovingDirectory; its entries move
//      up into the data directory; the two are removed. The directory is synced between steps.
//   3. A crash anywhere after the point of no return leaves the marker directories, and the next
//      open finishes the swap (FinishDataDirectorySwap) before it reads anything; a crash before
//      it leaves the old contents, and the staged copy that the next fetch removes.
#ifndef LEDGER_STORAGE_DATA_DIRECTORY_SWAP_H_
#define LEDGER_STORAGE_DATA_DIRECTORY_SWAP_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace ledger::storage {

// The swap's directories inside the data directory, named for what they hold.
inline constexpr char kSwapReadyDirectory[] = "swap_ready";
inline constexpr char kSwapMovingDirectory[] = "swap_moving";
inline constexpr char kSwapReplacedDirectory[] = "swap_replaced";

// Makes `staged` (a directory inside `data_dir`, on its filesystem) the contents of `data_dir`,
// keeping the entries named in `keep` as they are. Unavailable, naming the step and the errno's
// meaning, when a rename or a sync fails; the next FinishDataDirectorySwap goes on from there
// when the point of no return was passed.
absl::Status SwapDataDirectoryContents(const std::string& data_dir, const std::string& staged,
                                       const std::vector<std::string>& keep);

// Finishes a swap that a crash interrupted after its point of no return; nothing when there is
// none. Call it before anything reads the data directory.
absl::Status FinishDataDirectorySwap(const std::string& data_dir,
                                     const std::vector<std::string>& keep);

}  // namespace ledger::storage

#endif  // LEDGER_STORAGE_DATA_DIRECTORY_SWAP_H_
