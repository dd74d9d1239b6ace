// Defines the checks on a data directory that come before and during RocksDB's use of it: what
// `ledgerd init` may create a ledger in, what the server may open, and `DataDirectoryGuard`, which
// notices while serving that the directory was deleted, replaced or unmounted. Every refusal names
// the real cause (the errno's meaning), never a guess.
#ifndef LEDGER_STORAGE_DATA_DIRECTORY_H_
#define LEDGER_STORAGE_DATA_DIRECTORY_H_

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/annotated_mutex.h"

namespace ledger::storage {

// A missing directory is created (with its parents); an existing one must be an empty directory
// that this process may read and write on a writable filesystem. FailedPrecondition otherwise,
// naming the cause: a ledger is never created over anything, so that a lost or unmounted data
// directory can never be mistaken for a new one.
absl::Status PrepareDirectoryForInit(const std::string& dir);

// The directory must exist, be readable and writable by this process on a writable filesystem,
// and hold a RocksDB database (a CURRENT file). FailedPrecondition otherwise, naming the cause;
// a missing or empty directory is told to run `ledgerd init`.
absl::Status CheckDirectoryForOpen(const std::string& dir);

// What an errno means for a data directory, in words an operator can act on.
std::string DescribeErrno(int error_number);

// Thread-safe. Holds the data directory open from start-up on and answers whether it is still
// the same directory at the same path, still holding its database. Once it finds the directory
// gone it stays failed: the ledger must not go on writing into a deleted directory, nor into a
// different one that appeared at the same path.
class DataDirectoryGuard {
 public:
  // Opens `dir` (which must exist) and remembers its identity.
  static absl::StatusOr<std::unique_ptr<DataDirectoryGuard>> Open(const std::string& dir);
  ~DataDirectoryGuard();

  DataDirectoryGuard(const DataDirectoryGuard&) = delete;
  DataDirectoryGuard& operator=(const DataDirectoryGuard&) = delete;

  // OK while the directory is in place; Unavailable, saying what happened to it, from the first
  // check that finds it deleted, replaced, unmounted or emptied of its database. A few system
  // calls, no reads of data: cheap enough to run before every batch write.
  absl::Status Check();

  // Whether a check has found the directory lost. Any thread; never blocks.
  bool lost() const { return lost_.load(std::memory_order_acquire); }

 private:
  DataDirectoryGuard(std::string dir, int fd, dev_t device, ino_t inode)
      : dir_(std::move(dir)), fd_(fd), device_(device), inode_(inode) {}

  // Empty while the directory is in place, else what happened to it.
  std::string FindLoss() const;

  const std::string dir_;
  const int fd_;
  const dev_t device_;
  const ino_t inode_;
  ::ledger::Mutex mu_;
  absl::Status loss_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> lost_{false};
};

}  // namespace ledger::storage

#endif  // LEDGER_STORAGE_DATA_DIRECTORY_H_
