#include "base/sync_directory.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ledger {

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot open ", dir, ": ", std::strerror(errno)));
  }
  const int synced = fsync(fd);
  const int error_number = errno;
  close(fd);
  if (synced != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot sync ", dir, ": ", std::strerror(error_number)));
  }
  return absl::OkStatus();
}

}  // namespace ledger
