#include "storage/local_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/check.h"
#include "storage/data_directory.h"
#include "storage/local_log_reader.h"
#include "storage/log_segment_format.h"

namespace ledger::storage {
namespace {

constexpr absl::string_view kUnfinishedSuffix = ".seg.tmp";
// A bad entry is corruption, not a torn tail, when an entry this far ahead of it is still valid.
constexpr uint64_t kPlausiblePositionsAhead = uint64_t{1} << 40;

std::string SegmentHeader(uint64_t first_position) {
  std::string header(kSegmentHeaderBytes, '\0');
  std::memcpy(header.data(), kSegmentMagic, 8);
  PutU64(header.data() + 8, first_position);
  PutU32(header.data() + 16, 1);  // Version of the segment format.
  PutU32(header.data() + 20,
         static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(header.data()), 20)));
  return header;
}

// Every I/O failure of the log is Unavailable: a full disk or a failing device may clear.
absl::Status ErrnoStatus(int error_number, absl::string_view what, absl::string_view path) {
  return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", DescribeErrno(error_number)));
}

absl::Status WriteAll(int fd, const char* data, int64_t size, int64_t offset,
                      absl::string_view path) {
  while (size > 0) {
    const ssize_t written = pwrite(fd, data, static_cast<size_t>(size), offset);
    if (written < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "writing", path);
    }
    if (written == 0) return ErrnoStatus(ENOSPC, "writing", path);
    data += written;
    size -= written;
    offset += written;
  }
  return absl::OkStatus();
}

absl::Status WriteZeros(int fd, int64_t offset, int64_t size, absl::string_view path) {
  static const std::string* const kZeros = new std::string(1 << 20, '\0');
  while (size > 0) {
    const int64_t chunk = std::min<int64_t>(size, static_cast<int64_t>(kZeros->size()));
    if (absl::Status written = WriteAll(fd, kZeros->data(), chunk, offset, path); !written.ok()) {
      return written;
    }
    offset += chunk;
    size -= chunk;
  }
  return absl::OkStatus();
}

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "opening", dir);
  const int synced = fsync(fd);
  const int error_number = errno;
  close(fd);
  if (synced != 0) return ErrnoStatus(error_number, "syncing", dir);
  return absl::OkStatus();
}

// The bytes [offset, offset + length) of the file, or from `offset` to its end when `length`
// is negative.
absl::StatusOr<std::string> ReadFileRange(const std::string& path, int64_t offset, int64_t length) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "opening", path);
  struct stat info {};
  if (fstat(fd, &info) != 0) {
    const int error_number = errno;
    close(fd);
    return ErrnoStatus(error_number, "reading", path);
  }
  const int64_t end = length < 0 ? info.st_size : std::min<int64_t>(info.st_size, offset + length);
  std::string contents(static_cast<size_t>(std::max<int64_t>(0, end - offset)), '\0');
  int64_t done = 0;
  while (offset + done < end) {
    const ssize_t got =
        pread(fd, contents.data() + done, static_cast<size_t>(end - offset - done), offset + done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const int error_number = got < 0 ? errno : EIO;
      close(fd);
      return ErrnoStatus(error_number, "reading", path);
    }
    done += got;
  }
  close(fd);
  return contents;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  return ReadFileRange(path, 0, -1);
}

// Whether a valid entry later than `after` starts anywhere from `offset` on (entries start at
// multiples of 8): what tells corruption from a torn tail, which nothing valid follows.
bool ValidEntryFollows(absl::string_view segment, int64_t offset, uint64_t after) {
  for (int64_t at = Padded(offset); at + kEntryHeaderBytes <= static_cast<int64_t>(segment.size());
       at += 8) {
    const uint64_t position = GetU64(segment.data() + at + 8);
    if (position <= after || position - after > kPlausiblePositionsAhead) continue;
    if (ParseEntryAt(segment, at).kind == ParsedEntry::kValid) return true;
  }
  return false;
}

bool AllZero(absl::string_view bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](char c) { return c == 0; });
}

}  // namespace

std::string LogSegmentName(uint64_t first_position) {
  return absl::StrFormat("%020u%s", first_position, kSegmentSuffix);
}

absl::Status LocalLog::Create(const std::string& dir, uint64_t next_position, int64_t segment_bytes,
                              bool durable_segments) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return ErrnoStatus(error.value(), "creating", dir);
  LocalLogOptions options;
  options.dir = dir;
  options.segment_bytes = segment_bytes;
  options.durable_segments = durable_segments;
  LocalLog log(options, {}, -1, 0, next_position, next_position - 1);
  return log.Roll(next_position, 0);
}

absl::StatusOr<std::unique_ptr<LocalLog>> LocalLog::Open(const LocalLogOptions& options,
                                                         LogRecovery* recovery) {
  LogRecovery found;
  std::vector<Segment> segments;
  std::error_code error;
  for (const auto& file : std::filesystem::directory_iterator(options.dir, error)) {
    const std::string name = file.path().filename().string();
    if (absl::EndsWith(name, kUnfinishedSuffix)) {
      // A segment whose making was cut short by a crash: nothing was ever appended to it.
      std::error_code not_removed;  // Tried again at the next open; the listing goes on.
      std::filesystem::remove(file.path(), not_removed);
      continue;
    }
    std::optional<uint64_t> first = SegmentFirstPosition(name);
    if (!first.has_value()) continue;
    segments.push_back(Segment{.first_position = *first, .path = file.path().string()});
  }
  if (error) return ErrnoStatus(error.value(), "listing the log in", options.dir);
  if (segments.empty()) {
    return absl::DataLossError(absl::StrCat("the log in ", options.dir,
                                            " has no segment file: it was deleted or never made"));
  }
  std::sort(segments.begin(), segments.end(),
            [](const Segment& a, const Segment& b) { return a.first_position < b.first_position; });

  uint64_t expected = segments.front().first_position;
  int64_t write_offset = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    Segment& segment = segments[i];
    const bool last = i + 1 == segments.size();
    absl::StatusOr<std::string> contents = ReadWholeFile(segment.path);
    if (!contents.ok()) return contents.status();
    segment.size = static_cast<int64_t>(contents->size());
    const auto corrupt = [&](int64_t offset, absl::string_view what) {
      return absl::DataLossError(absl::StrCat(
          "the log is corrupt: ", what, " in ", segment.path, " at offset ", offset,
          " (entry position ", expected,
          "); entries after it are intact, so this is damage, not a write cut short. Restore the "
          "data directory from a backup (docs/operations.md, \"Backup and restore\")"));
    };
    if (segment.size < kSegmentHeaderBytes ||
        contents->substr(0, kSegmentHeaderBytes) != SegmentHeader(segment.first_position)) {
      return absl::DataLossError(absl::StrCat("the log is corrupt: the header of ", segment.path,
                                              " is not a ledgerd log segment's for its name"));
    }
    if (segment.first_position != expected) {
      return absl::DataLossError(absl::StrCat(
          "the log is corrupt: ", segment.path, " starts at position ", segment.first_position,
          " but the segment before it ends at ", expected - 1, " (a segment is missing)"));
    }
    int64_t offset = kSegmentHeaderBytes;
    while (true) {
      const ParsedEntry entry = ParseEntryAt(*contents, offset);
      if (entry.kind == ParsedEntry::kValid && entry.position == expected) {
        ++expected;
        ++found.entries;
        offset += entry.bytes;
        continue;
      }
      // The end of this segment's entries: zeros, a torn tail, or damage.
      if (offset + kEntryHeaderBytes > segment.size) break;  // Full to the last byte.
      if (entry.kind == ParsedEntry::kValid) return corrupt(offset, "an entry out of order");
      const bool zero = entry.kind == ParsedEntry::kZero;
      const bool valid_after = ValidEntryFollows(*contents, offset + 8, expected - 1);
      if (!last) {
        if (zero && !valid_after) break;  // Closed early: the next entry did not fit.
        return corrupt(offset,
                       zero ? "a zeroed entry" : "an entry whose checksum or length is wrong");
      }
      if (valid_after) {
        return corrupt(offset,
                       zero ? "a zeroed entry" : "an entry whose checksum or length is wrong");
      }
      // The last segment's end. Whatever is not zero after it is an entry cut short by a crash
      // (never acknowledged): zero it, so that the next append starts on a clean tail.
      const absl::string_view rest = absl::string_view(*contents).substr(offset);
      if (!AllZero(rest)) {
        found.torn_bytes = static_cast<int64_t>(rest.size());
        found.torn_at = absl::StrCat(segment.path, " at offset ", offset);
        const int fd = open(segment.path.c_str(), O_WRONLY | O_CLOEXEC);
        if (fd < 0) return ErrnoStatus(errno, "opening", segment.path);
        absl::Status zeroed = WriteZeros(fd, offset, segment.size - offset, segment.path);
        if (zeroed.ok() && fdatasync(fd) != 0) zeroed = ErrnoStatus(errno, "syncing", segment.path);
        close(fd);
        if (!zeroed.ok()) return zeroed;
      }
      break;
    }
    if (last) write_offset = offset;
  }
  const int fd = open(segments.back().path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "opening", segments.back().path);
  found.first_position = segments.front().first_position;
  found.last_position = expected - 1;
  if (recovery != nullptr) *recovery = found;
  const uint64_t first = segments.front().first_position;
  return std::unique_ptr<LocalLog>(
      new LocalLog(options, std::move(segments), fd, write_offset, first, expected - 1));
}

LocalLog::LocalLog(LocalLogOptions options, std::vector<Segment> segments, int active_fd,
                   int64_t write_offset, uint64_t first_position, uint64_t last_position)
    : options_(std::move(options)),
      segments_(std::move(segments)),
      first_position_(first_position),
      last_position_(last_position),
      active_fd_(active_fd),
      write_offset_(write_offset) {
  if (!segments_.empty()) {
    active_path_ = segments_.back().path;
    active_size_ = segments_.back().size;
  }
}

LocalLog::~LocalLog() {
  // A clean close leaves nothing to the OS: what was appended without a sync is synced now.
  if (!options_.sync && active_fd_ >= 0) fdatasync(active_fd_);
  if (active_fd_ >= 0) close(active_fd_);
}

absl::Status LocalLog::Fault(absl::string_view step) const {
  if (!options_.fault) return absl::OkStatus();
  return options_.fault(step);
}

absl::Status LocalLog::Roll(uint64_t first, int64_t min_bytes) {
  // Entries appended without a sync are made durable before any go to the next segment: a
  // recovery that found a later segment's entries after a torn earlier one would take it for
  // corruption. (Sync covers only the segment appended to.)
  if (!options_.sync && active_fd_ >= 0) {
    if (absl::Status synced = Sync(); !synced.ok()) return synced;
  }
  const int64_t size =
      std::max<int64_t>(options_.segment_bytes, Padded(kSegmentHeaderBytes + min_bytes));
  const std::string path = absl::StrCat(options_.dir, "/", LogSegmentName(first));
  absl::Status made;
  int fd = TakeSpare(first, size, path, made);
  if (!made.ok()) return made;
  if (fd < 0) {
    const std::string unfinished =
        absl::StrCat(options_.dir, "/", absl::StrFormat("%020u", first), kUnfinishedSuffix);
    // Made under a temporary name and renamed once zero-filled and synced, so that recovery
    // never finds a segment whose making was cut short.
    fd = open(unfinished.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus(errno, "creating", unfinished);
    const std::string header = SegmentHeader(first);
    made = Fault("segment");
    if (made.ok()) made = WriteAll(fd, header.data(), kSegmentHeaderBytes, 0, unfinished);
    if (options_.durable_segments) {
      // Zeros written, not a hole: fdatasync after an append then writes data blocks only.
      if (made.ok()) {
        made = WriteZeros(fd, kSegmentHeaderBytes, size - kSegmentHeaderBytes, unfinished);
      }
      if (made.ok() && fdatasync(fd) != 0) made = ErrnoStatus(errno, "syncing", unfinished);
    } else if (made.ok() && ftruncate(fd, size) != 0) {
      // A copy's: no I/O beyond its entries (a hole reads as zeros), which a backup taken under
      // load must not add to the disk the journal syncs on.
      made = ErrnoStatus(errno, "sizing", unfinished);
    }
    if (made.ok() && rename(unfinished.c_str(), path.c_str()) != 0) {
      made = ErrnoStatus(errno, "naming", path);
    }
    if (made.ok() && options_.durable_segments) made = SyncDirectory(options_.dir);
    if (!made.ok()) {
      close(fd);
      unlink(unfinished.c_str());
      return made;
    }
  }
  {
    ::ledger::MutexLock fd_lock(&fd_mu_);
    if (active_fd_ >= 0) close(active_fd_);
    active_fd_ = fd;
    active_path_ = path;
  }
  active_size_ = size;
  write_offset_ = kSegmentHeaderBytes;
  ::ledger::MutexLock lock(&mu_);
  if (!segments_.empty() && segments_.back().first_position == first) {
    // The segment appended to held no entry (an entry too large for it came first): the new one
    // took its name, and replaces it here too. Two records of one file would let DropBefore
    // delete the segment being written.
    segments_.back() = Segment{.first_position = first, .path = path, .size = size};
  } else {
    segments_.push_back(Segment{.first_position = first, .path = path, .size = size});
  }
  active_marks_.clear();
  active_end_ = kSegmentHeaderBytes;
  return absl::OkStatus();
}

absl::Status LocalLog::PrepareSpare() {
  int64_t size = 0;
  {
    ::ledger::MutexLock lock(&spare_mu_);
    if (spare_ != Spare::kNone) return absl::OkStatus();
    spare_ = Spare::kMaking;
    size = options_.segment_bytes;
  }
  const std::string spare = absl::StrCat(options_.dir, "/spare", kUnfinishedSuffix);
  absl::Status made = Fault("segment");
  int fd = -1;
  if (made.ok()) {
    fd = open(spare.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) made = ErrnoStatus(errno, "creating", spare);
  }
  if (made.ok()) made = WriteZeros(fd, 0, size, spare);
  if (made.ok() && fdatasync(fd) != 0) made = ErrnoStatus(errno, "syncing", spare);
  if (fd >= 0) close(fd);
  if (!made.ok()) unlink(spare.c_str());
  ::ledger::MutexLock lock(&spare_mu_);
  spare_ = made.ok() ? Spare::kReady : Spare::kNone;
  spare_size_ = size;
  return made;
}

int LocalLog::TakeSpare(uint64_t first, int64_t size, const std::string& path,
                        absl::Status& failure) {
  {
    ::ledger::MutexLock lock(&spare_mu_);
    if (spare_ != Spare::kReady || spare_size_ < size) return -1;
    spare_ = Spare::kTaking;
  }
  const std::string spare = absl::StrCat(options_.dir, "/spare", kUnfinishedSuffix);
  failure = Fault("segment");
  int fd = -1;
  if (failure.ok()) {
    fd = open(spare.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) failure = ErrnoStatus(errno, "opening", spare);
  }
  // The header into a block already written: the sync writes data only.
  const std::string header = SegmentHeader(first);
  if (failure.ok()) failure = WriteAll(fd, header.data(), kSegmentHeaderBytes, 0, spare);
  if (failure.ok() && fdatasync(fd) != 0) failure = ErrnoStatus(errno, "syncing", spare);
  if (failure.ok() && rename(spare.c_str(), path.c_str()) != 0) {
    failure = ErrnoStatus(errno, "naming", path);
  }
  if (failure.ok()) failure = SyncDirectory(options_.dir);
  ::ledger::MutexLock lock(&spare_mu_);
  spare_ = Spare::kNone;
  if (!failure.ok()) {
    if (fd >= 0) close(fd);
    // Not renamed (or renamed but its directory entry not synced): the spare is given up, and a
    // segment named `path` left behind holds no entry that counts; recovery reads it as empty.
    unlink(spare.c_str());
    return -1;
  }
  return fd;
}

absl::StatusOr<uint64_t> LocalLog::Append(absl::string_view payload) {
  if (payload.size() > UINT32_MAX) {
    return absl::InvalidArgumentError("a log entry must be smaller than 4 GiB");
  }
  uint64_t position = 0;
  {
    ::ledger::MutexLock lock(&mu_);
    if (!poison_.ok()) return poison_;
    position = last_position_ + 1;
  }
  const int64_t bytes = Padded(kEntryHeaderBytes + static_cast<int64_t>(payload.size()));
  if (write_offset_ + bytes > active_size_) {
    // Nothing is written when the new segment cannot be made (a full disk): not poisoned.
    if (absl::Status rolled = Roll(position, bytes); !rolled.ok()) return rolled;
  }
  char header[kEntryHeaderBytes];
  PutU32(header, static_cast<uint32_t>(payload.size()));
  PutU64(header + 8, position);
  PutU32(header + 4, EntryCrc(header, header + 8, payload));
  static const char kPadding[8] = {};
  iovec parts[3] = {
      {header, kEntryHeaderBytes},
      {const_cast<char*>(payload.data()), payload.size()},
      {const_cast<char*>(kPadding),
       static_cast<size_t>(bytes - kEntryHeaderBytes - static_cast<int64_t>(payload.size()))}};
  const std::string& path = active_path_;
  absl::Status written = Fault("write");
  if (written.ok()) {
    ssize_t wrote = 0;
    do {
      wrote = pwritev(active_fd_, parts, 3, write_offset_);
    } while (wrote < 0 && errno == EINTR);
    if (wrote < 0) {
      written = ErrnoStatus(errno, "appending to", path);
    } else if (wrote != bytes) {
      // Short: the rest is written by the same rule as a whole entry.
      std::string whole(header, kEntryHeaderBytes);
      whole.append(payload.data(), payload.size());
      whole.resize(static_cast<size_t>(bytes), '\0');
      written =
          WriteAll(active_fd_, whole.data() + wrote, bytes - wrote, write_offset_ + wrote, path);
    }
  }
  if (written.ok() && options_.sync) {
    written = Fault("sync");
    if (written.ok() && fdatasync(active_fd_) != 0) written = ErrnoStatus(errno, "syncing", path);
  }
  ::ledger::MutexLock lock(&mu_);
  if (!written.ok()) {
    poison_ = absl::UnavailableError(absl::StrCat(
        "the log could not be written (", written.message(),
        "); the entry may or may not be on disk, so writes stop until it is repaired"));
    poisoned_offset_ = write_offset_;
    poisoned_bytes_ = bytes;
    return poison_;
  }
  if (active_marks_.empty() || position - active_marks_.back().first >= kMarkEvery) {
    active_marks_.emplace_back(position, write_offset_);
  }
  write_offset_ += bytes;
  active_end_ = write_offset_;
  last_position_ = position;
  return position;
}

absl::Status LocalLog::Sync() {
  if (options_.sync) return absl::OkStatus();
  {
    // A sync that succeeds after one failed proves nothing of what the failed one held.
    ::ledger::MutexLock lock(&mu_);
    if (sync_failed_) return poison_;
  }
  absl::Status synced;
  {
    ::ledger::MutexLock fd_lock(&fd_mu_);
    if (active_fd_ < 0) return absl::OkStatus();
    synced = Fault("sync");
    if (synced.ok() && fdatasync(active_fd_) != 0) {
      synced = ErrnoStatus(errno, "syncing", active_path_);
    }
  }
  if (synced.ok()) return synced;
  ::ledger::MutexLock lock(&mu_);
  sync_failed_ = true;
  poison_ = absl::UnavailableError(absl::StrCat(
      "the log could not be synced (", synced.message(),
      "); entries written since the last sync may be lost, so writes stop until ledgerd starts "
      "again and its recovery decides them"));
  return poison_;
}

absl::Status LocalLog::Repair() {
  if (poisoned().ok()) return absl::OkStatus();
  {
    ::ledger::MutexLock lock(&mu_);
    if (sync_failed_) return poison_;
  }
  absl::Status zeroed = Fault("write");
  if (zeroed.ok()) zeroed = WriteZeros(active_fd_, poisoned_offset_, poisoned_bytes_, active_path_);
  if (zeroed.ok()) zeroed = Fault("sync");
  if (zeroed.ok() && fdatasync(active_fd_) != 0) {
    zeroed = ErrnoStatus(errno, "syncing", active_path_);
  }
  if (!zeroed.ok()) return zeroed;
  ::ledger::MutexLock lock(&mu_);
  poison_ = absl::OkStatus();
  return absl::OkStatus();
}

absl::Status LocalLog::poisoned() const {
  ::ledger::MutexLock lock(&mu_);
  return poison_;
}

absl::Status LocalLog::ReadFrom(
    uint64_t from,
    const std::function<absl::Status(uint64_t position, absl::string_view payload)>& read) const {
  std::vector<Segment> segments;
  uint64_t last = 0;
  // In the segment being appended to: where its entries end, and the nearest mark at or before
  // `from`, so that a read of its newest entries (a backup's) reads only those.
  int64_t active_end = 0;
  std::pair<uint64_t, int64_t> mark = {0, 0};
  {
    ::ledger::MutexLock lock(&mu_);
    segments = segments_;
    last = last_position_;
    active_end = active_end_;
    auto after = std::upper_bound(active_marks_.begin(), active_marks_.end(), from,
                                  [](uint64_t position, const std::pair<uint64_t, int64_t>& m) {
                                    return position < m.first;
                                  });
    if (after != active_marks_.begin()) mark = *std::prev(after);
  }
  if (from < segments.front().first_position) {
    return absl::OutOfRangeError(absl::StrCat("the log starts at position ",
                                              segments.front().first_position, ", after ", from));
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    if (i + 1 < segments.size() && segments[i + 1].first_position <= from) continue;
    const bool active = i + 1 == segments.size();
    uint64_t position = segments[i].first_position;
    int64_t base = 0;
    int64_t length = -1;
    if (active && active_end > 0) {
      length = active_end;
      if (mark.first != 0) {
        position = mark.first;
        base = mark.second;
        length = active_end - base;
      }
    }
    absl::StatusOr<std::string> contents = ReadFileRange(segments[i].path, base, length);
    if (!contents.ok()) return contents.status();
    int64_t offset = base == 0 ? kSegmentHeaderBytes : base;
    for (; position <= last && (active || position < segments[i + 1].first_position); ++position) {
      const ParsedEntry entry = ParseEntryAt(*contents, offset - base);
      if (entry.kind != ParsedEntry::kValid || entry.position != position) {
        return absl::DataLossError(absl::StrCat("the log entry at position ", position, " in ",
                                                segments[i].path, " at offset ", offset,
                                                " cannot be read back"));
      }
      offset += entry.bytes;
      if (position < from) continue;
      if (absl::Status done = read(position, entry.payload); !done.ok()) return done;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LogReader>> LocalLog::NewReader(uint64_t from) const {
  if (absl::StatusOr<SegmentPlace> place = Locate(from); !place.ok()) return place.status();
  return std::make_unique<LocalLogReader>(*this, from);
}

absl::StatusOr<LocalLog::SegmentPlace> LocalLog::Locate(uint64_t position) const {
  ::ledger::MutexLock lock(&mu_);
  if (position < first_position_) {
    return absl::OutOfRangeError(absl::StrCat("the log keeps entries from position ",
                                              first_position_, " on, not ", position));
  }
  auto after = std::upper_bound(
      segments_.begin(), segments_.end(), position,
      [](uint64_t p, const Segment& segment) { return p < segment.first_position; });
  const Segment& segment = *std::prev(after);
  SegmentPlace place{.path = segment.path,
                     .end_position = after == segments_.end() ? 0 : after->first_position,
                     .start_position = segment.first_position,
                     .start_offset = kSegmentHeaderBytes};
  if (after == segments_.end()) {
    place.written_end = active_end_;
    auto mark = std::upper_bound(
        active_marks_.begin(), active_marks_.end(), position,
        [](uint64_t p, const std::pair<uint64_t, int64_t>& m) { return p < m.first; });
    if (mark != active_marks_.begin()) {
      place.start_position = std::prev(mark)->first;
      place.start_offset = std::prev(mark)->second;
    }
  }
  return place;
}

absl::StatusOr<int> LocalLog::DropBefore(uint64_t position) {
  std::vector<std::string> doomed;
  {
    ::ledger::MutexLock lock(&mu_);
    size_t keep_from = 0;
    while (keep_from + 1 < segments_.size() &&
           segments_[keep_from + 1].first_position <= position) {
      ++keep_from;
    }
    for (size_t i = 0; i < keep_from; ++i) doomed.push_back(segments_[i].path);
    segments_.erase(segments_.begin(), segments_.begin() + static_cast<ptrdiff_t>(keep_from));
    first_position_ = segments_.front().first_position;
  }
  for (const std::string& path : doomed) {
    if (unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(errno, "deleting", path);
  }
  if (!doomed.empty()) {
    if (absl::Status synced = SyncDirectory(options_.dir); !synced.ok()) return synced;
  }
  return static_cast<int>(doomed.size());
}

uint64_t LocalLog::first_position() const {
  ::ledger::MutexLock lock(&mu_);
  return first_position_;
}

uint64_t LocalLog::last_position() const {
  ::ledger::MutexLock lock(&mu_);
  return last_position_;
}

std::vector<std::string> LocalLog::SegmentPaths() const {
  ::ledger::MutexLock lock(&mu_);
  std::vector<std::string> paths;
  for (const Segment& segment : segments_) paths.push_back(segment.path);
  return paths;
}

size_t LocalLog::SegmentCount() const {
  ::ledger::MutexLock lock(&mu_);
  return segments_.size();
}

int64_t LocalLog::DiskBytes() const {
  ::ledger::MutexLock lock(&mu_);
  int64_t bytes = 0;
  for (const Segment& segment : segments_) bytes += segment.size;
  return bytes;
}

absl::Status CopyLogEntries(const ReplicatedLog& log, uint64_t first, uint64_t last,
                            const std::string& dir, int64_t segment_bytes) {
  if (std::filesystem::exists(dir)) {
    return absl::FailedPreconditionError(absl::StrCat("copying the log: ", dir, " exists"));
  }
  if (absl::Status made = LocalLog::Create(dir, first, segment_bytes, /*durable_segments=*/false);
      !made.ok()) {
    return made;
  }
  LocalLogOptions options;
  options.dir = dir;
  options.segment_bytes = segment_bytes;
  options.sync = false;
  options.durable_segments = false;
  absl::StatusOr<std::unique_ptr<LocalLog>> copy = LocalLog::Open(options);
  if (!copy.ok()) return copy.status();
  if (last < first) return absl::OkStatus();
  uint64_t copied = first - 1;
  absl::Status read = log.ReadFrom(first, [&](uint64_t position, absl::string_view payload) {
    if (position > last) return absl::CancelledError("past the last entry to copy");
    absl::StatusOr<uint64_t> appended = (*copy)->Append(payload);
    if (!appended.ok()) return appended.status();
    LEDGER_CHECK(*appended == position);
    copied = position;
    return absl::OkStatus();
  });
  if (!read.ok() && !absl::IsCancelled(read)) return read;
  if (copied != last) {
    return absl::DataLossError(absl::StrCat("copying the log: it holds entries up to ", copied,
                                            " only, not up to ", last));
  }
  return absl::OkStatus();
}

}  // namespace ledger::storage
