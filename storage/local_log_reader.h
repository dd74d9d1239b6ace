// Defines `LocalLogReader`, a LogReader (storage/replicated_log.h) of a LocalLog: a watcher's place
// in the log's segment files. Each Read opens the segment that holds its next entry, reads what
// it passes in parts of at most kReadChunkBytes (more only for a larger entry), checks each
// entry's checksum and position, and closes the file; between calls it holds only where it is.
#ifndef LEDGER_STORAGE_LOCAL_LOG_READER_H_
#define LEDGER_STORAGE_LOCAL_LOG_READER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "storage/local_log.h"
#include "storage/replicated_log.h"

namespace ledger::storage {

class LocalLogReader final : public LogReader {
 public:
  // What one read of a segment asks for: bounds the memory of a Read, whatever `max_bytes`.
  static constexpr int64_t kReadChunkBytes = int64_t{256} << 10;

  // `log` must outlive the reader.
  LocalLogReader(const LocalLog& log, uint64_t from) : log_(log), next_(from) {}

  absl::StatusOr<int> Read(
      uint64_t last, int64_t max_bytes,
      const std::function<void(uint64_t position, absl::string_view payload)>& read) override;
  uint64_t next_position() const override { return next_; }

 private:
  // Makes segment_ the segment holding next_ (keeping the offset reached when it is the same).
  absl::Status Follow();

  const LocalLog& log_;
  uint64_t next_;
  // The segment followed, where its entries end (0: appended to when last looked at), and the
  // entry `at_` that starts at `offset_` in it (at most next_: entries before next_ are skipped).
  std::string segment_;
  uint64_t end_ = 0;
  // While it is the segment appended to: where its entries ended when last looked at (0: not
  // known, read whole parts).
  int64_t written_end_ = 0;
  uint64_t at_ = 0;
  int64_t offset_ = 0;
};

}  // namespace ledger::storage

#endif  // LEDGER_STORAGE_LOCAL_LOG_READER_H_
