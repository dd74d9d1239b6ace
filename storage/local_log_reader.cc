#include "storage/local_log_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "storage/log_segment_format.h"

namespace ledger::storage {
namespace {

// Closes the file when it goes out of scope.
class ReadOnlyFile {
 public:
  explicit ReadOnlyFile(const std::string& path) : fd_(open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  ~ReadOnlyFile() {
    if (fd_ >= 0) close(fd_);
  }
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

// Reads up to `size` bytes at `offset` into `buffer`; fewer only at the end of the file.
absl::Status ReadAt(int fd, int64_t offset, int64_t size, const std::string& path,
                    std::string& buffer) {
  buffer.resize(static_cast<size_t>(size));
  int64_t done = 0;
  while (done < size) {
    const ssize_t got =
        pread(fd, buffer.data() + done, static_cast<size_t>(size - done), offset + done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return absl::UnavailableError(
          absl::StrCat("reading the log segment ", path, ": ", std::strerror(errno)));
    }
    if (got == 0) break;
    done += got;
  }
  buffer.resize(static_cast<size_t>(done));
  return absl::OkStatus();
}

}  // namespace

absl::Status LocalLogReader::Follow() {
  absl::StatusOr<LocalLog::SegmentPlace> place = log_.Locate(next_);
  if (!place.ok()) return place.status();
  if (place->path != segment_) {
    segment_ = place->path;
    at_ = place->start_position;
    offset_ = place->start_offset;
  }
  end_ = place->end_position;
  return absl::OkStatus();
}

absl::StatusOr<int> LocalLogReader::Read(
    uint64_t last, int64_t max_bytes,
    const std::function<void(uint64_t position, absl::string_view payload)>& read) {
  if (next_ > last) return 0;
  // Once per call: whether the segment was dropped, or (appended to when last looked at) has
  // been left for a new one. Entries up to `last` were written before this look (the caller read
  // `last` first), so while end_ is 0 they are all in segment_.
  if (absl::Status followed = Follow(); !followed.ok()) return followed;
  int passed = 0;
  int64_t bytes = 0;
  std::string buffer;
  int64_t chunk = kReadChunkBytes;
  while (next_ <= last && (passed == 0 || bytes < max_bytes)) {
    if (end_ != 0 && at_ >= end_) {
      if (absl::Status followed = Follow(); !followed.ok()) return followed;
      continue;
    }
    ReadOnlyFile file(segment_);
    if (file.fd() < 0) {
      if (errno == ENOENT) {
        // DropBefore deleted it after Follow looked: Locate says from where the log is kept.
        if (absl::Status followed = Follow(); !followed.ok()) return followed;
        return absl::OutOfRangeError(
            absl::StrCat("the log segment holding position ", next_, " was deleted"));
      }
      return absl::UnavailableError(
          absl::StrCat("opening the log segment ", segment_, ": ", std::strerror(errno)));
    }
    if (absl::Status got = ReadAt(file.fd(), offset_, chunk, segment_, buffer); !got.ok()) {
      return got;
    }
    int64_t at = 0;
    // Entries up to `last` only: what follows may be half written.
    while (next_ <= last && (passed == 0 || bytes < max_bytes) && (end_ == 0 || at_ < end_)) {
      const bool whole_part = static_cast<int64_t>(buffer.size()) == chunk;
      if (at + kEntryHeaderBytes > static_cast<int64_t>(buffer.size()) && whole_part) break;
      const ParsedEntry entry = ParseEntryAt(buffer, at);
      if (entry.kind == ParsedEntry::kBad && entry.position == at_ && whole_part &&
          at + kEntryHeaderBytes + entry.payload_length > static_cast<int64_t>(buffer.size())) {
        // Cut off by the end of this part: read on from it (a larger part for a larger entry).
        chunk = std::max(kReadChunkBytes, Padded(kEntryHeaderBytes + entry.payload_length));
        break;
      }
      if (entry.kind != ParsedEntry::kValid || entry.position != at_) {
        return absl::DataLossError(absl::StrCat("the log entry at position ", at_, " in ", segment_,
                                                " at offset ", offset_, " cannot be read back"));
      }
      if (at_ >= next_) {
        read(at_, entry.payload);
        ++passed;
        bytes += static_cast<int64_t>(entry.payload.size());
        next_ = at_ + 1;
      }
      ++at_;
      at += entry.bytes;
      offset_ += entry.bytes;
    }
  }
  return passed;
}

}  // namespace ledger::storage
