#include "storage/data_directory.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ledger::storage {
namespace {

std::string InitHint(const std::string& dir) {
  return absl::StrCat(
      "If this is to be a new ledger, create it with `ledgerd init --data_dir=", dir,
      "`. If it should hold a ledger, it was deleted, moved, or its volume is not mounted: "
      "restore it, and do not run init over it");
}

absl::Status Refuse(const std::string& dir, absl::string_view problem) {
  return absl::FailedPreconditionError(absl::StrCat("data directory ", dir, ": ", problem));
}

// How many entries `dir` holds (at most 2 are counted) and the first one's name; the errno when
// it cannot be listed.
struct Listing {
  int error_number = 0;
  int entries = 0;
  std::string first;
};

Listing List(const std::string& dir) {
  Listing listing;
  DIR* stream = opendir(dir.c_str());
  if (stream == nullptr) {
    listing.error_number = errno;
    return listing;
  }
  while (listing.entries < 2) {
    errno = 0;
    const dirent* entry = readdir(stream);
    if (entry == nullptr) {
      listing.error_number = errno;
      break;
    }
    const absl::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    if (listing.entries++ == 0) listing.first = std::string(name);
  }
  closedir(stream);
  return listing;
}

// The directory exists: it must be one, and this process must be able to list it and write to it
// on a writable filesystem.
absl::Status CheckUsable(const std::string& dir, const struct stat& status, Listing& listing) {
  if (!S_ISDIR(status.st_mode)) return Refuse(dir, "it is not a directory");
  listing = List(dir);
  if (listing.error_number != 0) {
    return Refuse(dir, absl::StrCat("cannot list it: ", DescribeErrno(listing.error_number)));
  }
  struct statvfs filesystem;
  if (statvfs(dir.c_str(), &filesystem) == 0 && (filesystem.f_flag & ST_RDONLY) != 0) {
    return Refuse(dir, DescribeErrno(EROFS));
  }
  if (access(dir.c_str(), R_OK | W_OK | X_OK) != 0) {
    return Refuse(dir, absl::StrCat("cannot write to it: ", DescribeErrno(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

std::string DescribeErrno(int error_number) {
  switch (error_number) {
    case ENOENT:
      return "it does not exist (ENOENT)";
    case EACCES:
    case EPERM:
      return absl::StrCat("permission denied (", std::strerror(error_number),
                          "): ledgerd runs as uid ", geteuid(),
                          ", which needs read, write and search permission on it");
    case EROFS:
      return "it is on a read-only filesystem (EROFS): ledgerd must write its log and lock file";
    case ENOSPC:
      return "the filesystem is full (ENOSPC): free space on it";
    case EDQUOT:
      return "the disk quota is exhausted (EDQUOT)";
    case EIO:
      return "an I/O error (EIO): the disk or its connection may be failing";
    case ENOTDIR:
      return "a part of its path is not a directory (ENOTDIR)";
    case EMFILE:
    case ENFILE:
      return "too many open files (EMFILE): raise the open-file limit";
    default:
      return std::strerror(error_number);
  }
}

absl::Status PrepareDirectoryForInit(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("--data_dir must name a directory");
  struct stat status;
  if (stat(dir.c_str(), &status) != 0) {
    if (errno != ENOENT) return Refuse(dir, DescribeErrno(errno));
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (error) {
      return Refuse(dir, absl::StrCat("cannot create it: ", DescribeErrno(error.value())));
    }
    if (stat(dir.c_str(), &status) != 0) return Refuse(dir, DescribeErrno(errno));
  }
  Listing listing;
  if (absl::Status usable = CheckUsable(dir, status, listing); !usable.ok()) return usable;
  if (listing.entries == 0) return absl::OkStatus();
  if (std::filesystem::exists(std::filesystem::path(dir) / "CURRENT")) {
    return Refuse(dir, "it already holds a database; init never creates a ledger over one");
  }
  return Refuse(dir, absl::StrCat("it is not empty (it holds \"", listing.first,
                                  "\"); init creates a ledger only in a missing or empty "
                                  "directory"));
}

absl::Status CheckDirectoryForOpen(const std::string& dir) {
  struct stat status;
  if (stat(dir.c_str(), &status) != 0) {
    if (errno == ENOENT) {
      return Refuse(dir, absl::StrCat("it does not exist, so it holds no ledger. ", InitHint(dir)));
    }
    return Refuse(dir, DescribeErrno(errno));
  }
  Listing listing;
  if (absl::Status usable = CheckUsable(dir, status, listing); !usable.ok()) return usable;
  if (listing.entries == 0) {
    return Refuse(dir, absl::StrCat("it is empty, so it holds no ledger. ", InitHint(dir)));
  }
  if (access((std::filesystem::path(dir) / "CURRENT").c_str(), F_OK) != 0) {
    return Refuse(dir, absl::StrCat("it holds files (such as \"", listing.first,
                                    "\") but no ledgerd database (no RocksDB CURRENT file). "
                                    "ledgerd never starts empty over data it cannot read: move "
                                    "the directory away or pass another --data_dir"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DataDirectoryGuard>> DataDirectoryGuard::Open(
    const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Refuse(dir, absl::StrCat("cannot open it: ", DescribeErrno(errno)));
  struct stat status;
  if (fstat(fd, &status) != 0) {
    const int error_number = errno;
    close(fd);
    return Refuse(dir, DescribeErrno(error_number));
  }
  return std::unique_ptr<DataDirectoryGuard>(
      new DataDirectoryGuard(dir, fd, status.st_dev, status.st_ino));
}

DataDirectoryGuard::~DataDirectoryGuard() { close(fd_); }

std::string DataDirectoryGuard::FindLoss() const {
  struct stat held;
  if (fstat(fd_, &held) == 0 && held.st_nlink == 0) return "was deleted";
  struct stat at_path;
  if (stat(dir_.c_str(), &at_path) != 0) {
    return absl::StrCat("cannot be found at its path any more (", DescribeErrno(errno),
                        "): it was deleted, moved or unmounted");
  }
  if (at_path.st_dev != device_ || at_path.st_ino != inode_) {
    return "was replaced: its path now names another directory (moved, replaced or unmounted)";
  }
  if (faccessat(fd_, "CURRENT", F_OK, 0) != 0) {
    return absl::StrCat("lost its database files (CURRENT: ", DescribeErrno(errno), ")");
  }
  return "";
}

absl::Status DataDirectoryGuard::Check() {
  if (!lost()) {
    std::string loss = FindLoss();
    if (loss.empty()) return absl::OkStatus();
    ::ledger::MutexLock lock(&mu_);
    if (!lost()) {
      loss_ = absl::UnavailableError(absl::StrCat(
          "data directory ", dir_, " ", loss,
          "; writes are refused until ledgerd is restarted on the restored directory"));
      lost_.store(true, std::memory_order_release);
    }
    return loss_;
  }
  ::ledger::MutexLock lock(&mu_);
  return loss_;
}

}  // namespace ledger::storage
