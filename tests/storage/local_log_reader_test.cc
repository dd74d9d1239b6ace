#include "storage/local_log_reader.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/local_log.h"
#include "tests/scratch_dir.h"

namespace ledger::storage {
namespace {

using ::testing::HasSubstr;
using testing_util::ScratchDir;
using Entries = std::vector<std::pair<uint64_t, std::string>>;

std::string PayloadOf(uint64_t position, size_t size) {
  std::string payload(size, '\0');
  for (size_t i = 0; i < size; ++i) payload[i] = static_cast<char>('a' + (position * 7 + i) % 26);
  return payload;
}

class LocalLogReaderTest : public testing::Test {
 protected:
  void SetUp() override { MakeLog(4096); }  // Many segments for a few entries.

  // A new, empty log of segments of `segment_bytes` in place of the fixture's.
  void MakeLog(int64_t segment_bytes) {
    log_.reset();
    options_.dir = dir_.path() + "/log";
    std::filesystem::remove_all(options_.dir);
    options_.segment_bytes = segment_bytes;
    ASSERT_TRUE(LocalLog::Create(options_.dir, 1, options_.segment_bytes).ok());
    absl::StatusOr<std::unique_ptr<LocalLog>> log = LocalLog::Open(options_);
    ASSERT_TRUE(log.ok()) << log.status();
    log_ = *std::move(log);
  }

  // Appends entries of `size` bytes up to position `last`; returns what they hold.
  Entries AppendThrough(uint64_t last, size_t size) {
    Entries appended;
    while (log_->last_position() < last) {
      const uint64_t position = log_->last_position() + 1;
      absl::StatusOr<uint64_t> got = log_->Append(PayloadOf(position, size));
      EXPECT_TRUE(got.ok()) << got.status();
      if (!got.ok()) break;
      appended.emplace_back(*got, PayloadOf(position, size));
    }
    return appended;
  }

  // Reads everything from `from` to the log's end in calls of at most `max_bytes`.
  static Entries ReadToEnd(LogReader& reader, uint64_t last, int64_t max_bytes,
                           int* calls = nullptr) {
    Entries read;
    while (true) {
      absl::StatusOr<int> passed =
          reader.Read(last, max_bytes, [&](uint64_t position, absl::string_view payload) {
            read.emplace_back(position, std::string(payload));
          });
      EXPECT_TRUE(passed.ok()) << passed.status();
      if (!passed.ok() || *passed == 0) break;
      if (calls != nullptr) ++*calls;
    }
    return read;
  }

  ScratchDir dir_;
  LocalLogOptions options_;
  std::unique_ptr<LocalLog> log_;
};

TEST_F(LocalLogReaderTest, ReadsEveryEntryInOrderAcrossSegmentsInBoundedCalls) {
  const Entries appended = AppendThrough(300, 100);
  ASSERT_GT(log_->SegmentCount(), 5u);
  absl::StatusOr<std::unique_ptr<LogReader>> reader = log_->NewReader(1);
  ASSERT_TRUE(reader.ok()) << reader.status();
  int calls = 0;
  EXPECT_EQ(ReadToEnd(**reader, 300, 1000, &calls), appended);
  // 100-byte payloads, up to the one that reaches 1,000 bytes: 10 a call.
  EXPECT_EQ(calls, 30);
  EXPECT_EQ((*reader)->next_position(), 301u);
}

TEST_F(LocalLogReaderTest, StartsAtAnyPositionAndGivesTheSameSuffix) {
  // Past kMarkEvery (64) entries in the segment appended to, and in closed segments.
  ASSERT_NO_FATAL_FAILURE(MakeLog(64 << 10));
  const Entries appended = AppendThrough(1000, 40);
  for (uint64_t from : {1, 2, 63, 64, 65, 130, 500, 999, 1000, 1001}) {
    absl::StatusOr<std::unique_ptr<LogReader>> reader = log_->NewReader(from);
    ASSERT_TRUE(reader.ok()) << reader.status();
    const Entries suffix(appended.begin() + static_cast<ptrdiff_t>(from - 1), appended.end());
    EXPECT_EQ(ReadToEnd(**reader, 1000, 4096), suffix) << "from " << from;
  }
}

TEST_F(LocalLogReaderTest, WaitsAtTheEndAndFollowsNewEntriesIntoNewSegments) {
  Entries appended = AppendThrough(5, 100);
  absl::StatusOr<std::unique_ptr<LogReader>> reader = log_->NewReader(1);
  ASSERT_TRUE(reader.ok());
  Entries read = ReadToEnd(**reader, 5, 1 << 20);
  // Nothing past `last`, even when the log holds more.
  Entries more = AppendThrough(8, 100);
  appended.insert(appended.end(), more.begin(), more.end());
  absl::StatusOr<int> none = (*reader)->Read(5, 1 << 20, [](uint64_t, absl::string_view) {});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0);
  const size_t segments = log_->SegmentCount();
  more = AppendThrough(200, 100);
  appended.insert(appended.end(), more.begin(), more.end());
  ASSERT_GT(log_->SegmentCount(), segments);
  Entries rest = ReadToEnd(**reader, 200, 1 << 20);
  read.insert(read.end(), rest.begin(), rest.end());
  EXPECT_EQ(read, appended);
}

TEST_F(LocalLogReaderTest, AnEntryLargerThanAReadPartComesWhole) {
  ASSERT_NO_FATAL_FAILURE(MakeLog(4 << 20));  // In the segment appended to, with the others.
  Entries appended = AppendThrough(3, 10);
  const std::string large = PayloadOf(4, 3 * LocalLogReader::kReadChunkBytes + 5);
  ASSERT_EQ(*log_->Append(large), 4u);
  appended.emplace_back(4, large);
  Entries more = AppendThrough(6, 10);
  appended.insert(appended.end(), more.begin(), more.end());
  ASSERT_EQ(log_->SegmentCount(), 1u);
  absl::StatusOr<std::unique_ptr<LogReader>> reader = log_->NewReader(1);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(ReadToEnd(**reader, 6, 1 << 20), appended);
  // And in a closed segment of its own size.
  ASSERT_NO_FATAL_FAILURE(MakeLog(4096));
  appended = AppendThrough(3, 10);
  ASSERT_EQ(*log_->Append(large), 4u);
  appended.emplace_back(4, large);
  more = AppendThrough(6, 10);
  appended.insert(appended.end(), more.begin(), more.end());
  ASSERT_GE(log_->SegmentCount(), 2u);
  reader = log_->NewReader(1);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(ReadToEnd(**reader, 6, 1 << 20), appended);
}

TEST_F(LocalLogReaderTest, AReaderBehindWhatTheLogKeepsIsToldWhereItStarts) {
  AppendThrough(200, 100);
  absl::StatusOr<std::unique_ptr<LogReader>> reader = log_->NewReader(1);
  ASSERT_TRUE(reader.ok());
  absl::StatusOr<int> some = (*reader)->Read(200, 500, [](uint64_t, absl::string_view) {});
  ASSERT_TRUE(some.ok());
  EXPECT_EQ(*some, 5);
  ASSERT_GT(*log_->DropBefore(150), 0);
  const uint64_t first = log_->first_position();
  ASSERT_GT(first, 6u);
  absl::StatusOr<int> dropped = (*reader)->Read(200, 500, [](uint64_t, absl::string_view) {});
  EXPECT_TRUE(absl::IsOutOfRange(dropped.status())) << dropped.status();
  EXPECT_THAT(dropped.status().message(), HasSubstr(absl::StrCat("from position ", first)));
  EXPECT_EQ((*reader)->next_position(), 6u);
  absl::StatusOr<std::unique_ptr<LogReader>> late = log_->NewReader(first - 1);
  EXPECT_TRUE(absl::IsOutOfRange(late.status())) << late.status();
  absl::StatusOr<std::unique_ptr<LogReader>> kept = log_->NewReader(first);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(ReadToEnd(**kept, 200, 1 << 20).size(), 200 - first + 1);
}

TEST_F(LocalLogReaderTest, AnEntryThatCannotBeReadBackIsDataLoss) {
  AppendThrough(10, 100);
  log_.reset();
  // Flip a payload byte of entry 3 (32-byte header, then entries of 16 + 100 bytes padded to 120).
  const std::string segment = options_.dir + "/" + LogSegmentName(1);
  {
    std::fstream file(segment, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(32 + 2 * 120 + 16 + 5);
    file.put('#');
  }
  // A log whose entry 3 went bad after it was opened (Open would refuse it: corruption).
  options_.dir = dir_.path() + "/log2";
  ASSERT_TRUE(LocalLog::Create(options_.dir, 1, 4096).ok());
  log_ = *LocalLog::Open(options_);
  AppendThrough(10, 100);
  std::filesystem::copy_file(segment, options_.dir + "/" + LogSegmentName(1),
                             std::filesystem::copy_options::overwrite_existing);
  absl::StatusOr<std::unique_ptr<LogReader>> reader = log_->NewReader(1);
  ASSERT_TRUE(reader.ok());
  Entries read;
  absl::StatusOr<int> passed =
      (*reader)->Read(10, 1 << 20, [&](uint64_t position, absl::string_view payload) {
        read.emplace_back(position, std::string(payload));
      });
  EXPECT_TRUE(absl::IsDataLoss(passed.status())) << passed.status();
  EXPECT_THAT(passed.status().message(), HasSubstr("position 3"));
  EXPECT_EQ(read.size(), 2u);  // The two before it, once.
}

// The journal thread appends while a watcher's thread reads: run under ThreadSanitizer too.
TEST_F(LocalLogReaderTest, ReadsWhileTheLogIsAppendedToAndRolls) {
  std::atomic<uint64_t> committed{0};
  Entries appended;
  std::thread writer([&] {
    for (uint64_t position = 1; position <= 2000; ++position) {
      absl::StatusOr<uint64_t> got = log_->Append(PayloadOf(position, 64));
      ASSERT_TRUE(got.ok());
      appended.emplace_back(*got, PayloadOf(position, 64));
      committed.store(*got, std::memory_order_release);
    }
  });
  absl::StatusOr<std::unique_ptr<LogReader>> reader = log_->NewReader(1);
  ASSERT_TRUE(reader.ok());
  Entries read;
  while (read.size() < 2000) {
    absl::StatusOr<int> passed =
        (*reader)->Read(committed.load(std::memory_order_acquire), 700,
                        [&](uint64_t position, absl::string_view payload) {
                          read.emplace_back(position, std::string(payload));
                        });
    ASSERT_TRUE(passed.ok()) << passed.status();
  }
  writer.join();
  EXPECT_EQ(read, appended);
}

}  // namespace
}  // namespace ledger::storage
