#include "storage/local_log_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

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

// Bytes read from a file: not zero-filled first, as a std::string's resize would (that cost a
// tenth of the watch feed's time when it read whole parts).
struct ReadBuffer {
  std::unique_ptr<char[]> data;
  int64_t capacity = 0;
  int64_t size = 0;
  absl::string_view view() const { return {data.get(), static_cast<size_t>(size)}; }
};

// Reads up to `size` bytes at `offset` into `buffer`; fewer only at the end of the file.
absl::Status ReadAt(int fd, int64_t offset, int64_t size, const std::string& path,
                    ReadBuffer& buffer) {
  if (buffer.capacity < size) {
    buffer.data.reset(new char[static_cast<size_t>(size)]);
    buffer.capacity = size;
  }
  int64_t done = 0;
  while (done < size) {
    const ssize_t got =
        pread(fd, buffer.data.get() + done, static_cast<size_t>(size - done), offset + done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return absl::UnavailableError(
          absl::StrCat("reading the log segment ", path, ": ", std::strerror(errno)));
    }
    if (got == 0) break;
    done += got;
  }
  buffer.size = done;
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
  written_end_ = place->written_end;
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
  ReadBuffer buffer;
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
    // In the segment appended to, no further than its entries reach (what follows is zeros).
    const int64_t want = written_end_ > offset_ ? std::min(chunk, written_end_ - offset_) : chunk;
    if (absl::Status got = ReadAt(file.fd(), offset_, want, segment_, buffer); !got.ok()) {
      return got;
    }
    int64_t at = 0;
    // Entries up to `last` only: what follows may be half written.
    while (next_ <= last && (passed == 0 || bytes < max_bytes) && (end_ == 0 || at_ < end_)) {
      // Whether the file goes on past this part, which may have cut an entry off.
      const int64_t part_start = offset_ - at;
      const bool cut_by_part = buffer.size == want && (written_end_ <= part_start ||
                                                       part_start + want < written_end_);
      if (at + kEntryHeaderBytes > buffer.size && cut_by_part) break;
      const ParsedEntry entry = ParseEntryAt(buffer.view(), at);
      if (entry.kind == ParsedEntry::kBad && entry.position == at_ && cut_by_part &&
          at + kEntryHeaderBytes + entry.payload_length > buffer.size) {
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
