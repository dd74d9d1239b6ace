#include "storage/local_log.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/scratch_dir.h"

namespace ledger::storage {
namespace {

using ::testing::HasSubstr;
using testing_util::ScratchDir;

// The on-disk layout (local_log.h): a 32-byte segment header, then entries of a 16-byte header
// and the payload, padded to 8 bytes.
constexpr int64_t kSegmentHeader = 32;
int64_t LogEntryBytes(size_t payload) { return (16 + static_cast<int64_t>(payload) + 7) / 8 * 8; }

std::string EntryPayload(uint64_t position, size_t size) {
  std::string payload(size, '\0');
  for (size_t i = 0; i < size; ++i) payload[i] = static_cast<char>('a' + (position * 7 + i) % 26);
  return payload;
}

std::string ReadLogFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void WriteLogFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
}

std::unique_ptr<LocalLog> OpenLogOrDie(const LocalLogOptions& options,
                                       LogRecovery* recovery = nullptr) {
  absl::StatusOr<std::unique_ptr<LocalLog>> log = LocalLog::Open(options, recovery);
  EXPECT_TRUE(log.ok()) << log.status();
  return log.ok() ? *std::move(log) : nullptr;
}

std::vector<std::pair<uint64_t, std::string>> ReadAllEntries(const LocalLog& log, uint64_t from) {
  std::vector<std::pair<uint64_t, std::string>> entries;
  absl::Status read = log.ReadFrom(from, [&](uint64_t position, absl::string_view payload) {
    entries.emplace_back(position, std::string(payload));
    return absl::OkStatus();
  });
  EXPECT_TRUE(read.ok()) << read;
  return entries;
}

class LocalLogTest : public testing::Test {
 protected:
  void SetUp() override {
    options_.dir = scratch_.Sub("log");
    options_.segment_bytes = 4096;
    ASSERT_TRUE(LocalLog::Create(options_.dir, 1, options_.segment_bytes).ok());
  }
  // Appends entries 1..count, each of `size` bytes (or sizes varying with the position when 0).
  std::vector<std::string> AppendEntries(LocalLog& log, int count, size_t size = 0) {
    std::vector<std::string> payloads;
    for (int i = 0; i < count; ++i) {
      const uint64_t position = log.last_position() + 1;
      std::string payload = EntryPayload(position, size != 0 ? size : 1 + (position * 37) % 300);
      absl::StatusOr<uint64_t> appended = log.Append(payload);
      EXPECT_TRUE(appended.ok()) << appended.status();
      EXPECT_EQ(appended.value_or(0), position);
      payloads.push_back(std::move(payload));
    }
    return payloads;
  }
  // A fault hook that fails every sync while `*fail` is true.
  static std::function<absl::Status(absl::string_view)> FailSyncWhile(const bool* fail) {
    return [fail](absl::string_view step) {
      if (step == "sync" && *fail) return absl::UnavailableError("injected EIO");
      return absl::OkStatus();
    };
  }
  std::string FirstSegment() const { return options_.dir + "/" + LogSegmentName(1); }

  ScratchDir scratch_;
  LocalLogOptions options_;
};

TEST_F(LocalLogTest, EntriesAreReadBackInOrderAcrossSegmentsAndAReopen) {
  std::vector<std::string> written;
  {
    std::unique_ptr<LocalLog> log = OpenLogOrDie(options_);
    written = AppendEntries(*log, 200);
    EXPECT_GT(log->SegmentPaths().size(), 5u);  // 4 KiB segments: the entries span many.
  }
  LogRecovery recovery;
  std::unique_ptr<LocalLog> log = OpenLogOrDie(options_, &recovery);
  EXPECT_EQ(recovery.first_position, 1u);
  EXPECT_EQ(recovery.last_position, 200u);
  EXPECT_EQ(recovery.entries, 200);
  EXPECT_EQ(recovery.torn_bytes, 0);
  const auto all = ReadAllEntries(*log, 1);
  ASSERT_EQ(all.size(), 200u);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].first, i + 1);
    EXPECT_EQ(all[i].second, written[i]);
  }
  const auto suffix = ReadAllEntries(*log, 150);
  ASSERT_EQ(suffix.size(), 51u);
  EXPECT_EQ(suffix.front().first, 150u);
  // Appends go on from the last position.
  EXPECT_EQ(log->Append("next").value_or(0), 201u);
}

// A read of the segment being appended to starts at the nearest mark (every 64th entry) and
// stops where the entries end: from every position, the same entries as a read from the start.
TEST_F(LocalLogTest, ReadsFromAnyPositionOfTheActiveSegmentSeeExactlyItsEntries) {
  options_.segment_bytes = 1 << 20;  // After the first 4 KiB segment, one for all the rest.
  std::unique_ptr<LocalLog> log = OpenLogOrDie(options_);
  const std::vector<std::string> written = AppendEntries(*log, 300);
  ASSERT_EQ(log->SegmentCount(), 2u);
  for (const uint64_t from : {1u, 2u, 63u, 64u, 65u, 66u, 128u, 129u, 200u, 299u, 300u}) {
    const auto read = ReadAllEntries(*log, from);
    ASSERT_EQ(read.size(), 301 - from) << from;
    for (size_t i = 0; i < read.size(); ++i) {
      ASSERT_EQ(read[i].first, from + i);
      ASSERT_EQ(read[i].second, written[from + i - 1]) << from + i;
    }
  }
  EXPECT_TRUE(ReadAllEntries(*log, 301).empty());
}

TEST_F(LocalLogTest, AnEntryLargerThanASegmentGetsASegmentOfItsOwn) {
  {
    std::unique_ptr<LocalLog> log = OpenLogOrDie(options_);
    AppendEntries(*log, 2, 100);
    EXPECT_EQ(log->Append(std::string(10000, 'x')).value_or(0), 3u);
    AppendEntries(*log, 2, 100);
  }
  std::unique_ptr<LocalLog> log = OpenLogOrDie(options_);
  const auto all = ReadAllEntries(*log, 1);
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(all[2].second, std::string(10000, 'x'));
}

// The first entry of a new log too large for its first segment: the larger segment made for it
// replaces the empty one (same name), and a checkpoint's DropBefore must not delete it. It once
// did: the log kept two records of one file and unlinked the segment being written.
TEST_F(LocalLogTest, AnEntryTooLargeForAnEmptySegmentReplacesItAndSurvivesDropBefore) {
  {
    std::unique_ptr<LocalLog> log = OpenLogOrDie(options_);
    EXPECT_EQ(log->Append(std::string(10000, 'x')).value_or(0), 1u);
    EXPECT_EQ(log->SegmentCount(), 1u);
    EXPECT_EQ(log->DropBefore(2).value_or(-1), 0);
    EXPECT_TRUE(std::filesystem::exists(FirstSegment()));
    AppendEntries(*log, 3, 100);
  }
  std::unique_ptr<LocalLog> log = OpenLogOrDie(options_);
  const auto all = ReadAllEntries(*log, 1);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].second, std::string(10000, 'x'));
}

// A crash while the last entry was written leaves any prefix of its bytes (the rest still the
// segment's zeros): recovery keeps every entry before it, zeroes what was written of it, and
// the log goes on from there.
TEST_F(LocalLogTest, ATornLastEntryCutAtEveryByteIsTheEndOfTheLog) {
  std::vector<std::string> payloads;
  {
    std::unique_ptr<LocalLog> log = OpenLogOrDie(options_);
    payloads = AppendEntries(*log, 5, 60);
  }
  const std::string whole = ReadLogFile(FirstSegment());
  const int64_t last_start = kSegmentHeader + 4 * LogEntryBytes(60);
  // Its padding is zeros whether written or not: a cut there leaves the entry whole.
  const int64_t last_end = last_start + 16 + 60;
  for (int64_t cut = last_start; cut < last_end; ++cut) {
    SCOPED_TRACE(absl::StrCat("cut at byte ", cut));
    std::string torn = whole;
    std::fill(torn.begin() + cut, torn.begin() + last_end, '\0');
    WriteLogFile(FirstSegment(), torn);
    LogRecovery recovery;
    std::unique_ptr<LocalLog> log = OpenLogOrDie(options_, &recovery);
    ASSERT_NE(log, nullptr);
    EXPECT_EQ(recovery.last_position, 4u);
    EXPECT_EQ(recovery.torn_bytes > 0, cut > last_start);
    // The torn bytes were zeroed on disk: the tail is clean for the next append.
    const std::string repaired = ReadLogFile(FirstSegment());
    EXPECT_EQ(repaired.substr(0, last_start), whole.substr(0, last_start));
    EXPECT_EQ(repaired.find_first_not_of('\0', last_start), std::string::npos);
    EXPECT_EQ(log->Append("after").value_or(0), 5u);
    log.reset();
    std::unique_ptr<LocalLog> again = OpenLogOrDie(options_);
    const auto all = ReadAllEntries(*again, 1);
    ASSERT_EQ(all.size(), 5u);
    EXPECT_EQ(all[3].second, payloads[3]);
    EXPECT_EQ(all[4].second, "after");
  }
}

// The same for a long log over many segments, cut at random bytes of its last entry, and for a
// last entry whose checksum is wrong (a write the disk tore inside a sector).
TEST_F(LocalLogTest, RandomTornTailsOfALongLogAndABadLastChecksumKeepEveryEarlierEntry) {
  std::vector<std::string> payloads;
  {
    std::unique_ptr<LocalLog> log = OpenLogOrDie(options_);
    payloads = AppendEntries(*log, 300);
  }
  std::unique_ptr<LocalLog> probe = OpenLogOrDie(options_);
  const std::string last_segment = probe->SegmentPaths().back();
  probe.reset();
  const std::string whole = ReadLogFile(last_segment);
  // The last entry's place: after every entry of the last segment before it.
  const uint64_t first_in_segment =
      std::stoull(std::filesystem::path(last_segment).filename().string().substr(0, 20));
  int64_t last_start = kSegmentHeader;
  for (uint64_t position = first_in_segment; position < 300; ++position) {
    last_start += LogEntryBytes(payloads[position - 1].size());
  }
  const int64_t last_end = last_start + 16 + static_cast<int64_t>(payloads[299].size());
  std::mt19937_64 random(20261203);
  for (int trial = 0; trial < 40; ++trial) {
    std::string torn = whole;
    if (trial % 4 == 0) {
      // A bit flipped in the last entry's payload.
      torn[static_cast<size_t>(last_start + 16 +
                               static_cast<int64_t>(random() % payloads[299].size()))] ^= 0x10;
    } else {
      const int64_t cut =
          last_start + 1 + static_cast<int64_t>(random() % (last_end - last_start - 1));
      std::fill(torn.begin() + cut, torn.begin() + last_end, '\0');
    }
    WriteLogFile(last_segment, torn);
    LogRecovery recovery;
    std::unique_ptr<LocalLog> log = OpenLogOrDie(options_, &recovery);
    ASSERT_NE(log, nullptr);
    EXPECT_EQ(recovery.last_position, 299u) << "trial " << trial;
    EXPECT_GT(recovery.torn_bytes, 0);
    const auto all = ReadAllEntries(*log, 1);
    ASSERT_EQ(all.size(), 299u);
    EXPECT_EQ(all.back().second, payloads[298]);
  }
}

TEST_F(LocalLogTest, AFlippedBitBeforeTheLastEntryIsCorruptionNamingSegmentAndOffset) {
  {
    std::unique_ptr<LocalLog> log = OpenLogOrDie(options_);
    AppendEntries(*log, 10, 40);
  }
  const std::string whole = ReadLogFile(FirstSegment());
  const int64_t third = kSegmentHeader + 2 * LogEntryBytes(40);
  // In the payload, and in the length field (which then points nowhere useful).
  for (const int64_t at : {third + 16 + 5, third + 1}) {
    SCOPED_TRACE(absl::StrCat("flipped at byte ", at));
    std::string damaged = whole;
    damaged[static_cast<size_t>(at)] ^= 0x04;
    WriteLogFile(FirstSegment(), damaged);
    absl::StatusOr<std::unique_ptr<LocalLog>> log = LocalLog::Open(options_);
    ASSERT_FALSE(log.ok());
    EXPECT_EQ(log.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(log.status().message(), HasSubstr(FirstSegment()));
    EXPECT_THAT(log.status().message(), HasSubstr(absl::StrCat("at offset ", third)));
    EXPECT_THAT(log.status().message(), HasSubstr("entry position 3"));
    EXPECT_THAT(log.status().message(), HasSubstr("Restore the data directory from a backup"));
    // Nothing was changed: the damage stays there for the operator to see.
    EXPECT_EQ(ReadLogFile(FirstSegment()), damaged);
  }
}

TEST_F(LocalLogTest, AMissingSegmentIsCorruption) {
  {
    std::unique_ptr<LocalLog> log = OpenLogOrDie(options_);
    AppendEntries(*log, 100, 200);
    ASSERT_GE(log->SegmentPaths().size(), 3u);
    std::filesystem::remove(log->SegmentPaths()[1]);
  }
  absl::StatusOr<std::unique_ptr<LocalLog>> log = LocalLog::Open(options_);
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(log.status().message(), HasSubstr("a segment is missing"));
}

// PostgreSQL's fsync lesson: after a failed sync the entry may or may not be on disk, so the log
// takes no append until Repair has zeroed it and synced; then the position is reused.
TEST_F(LocalLogTest, AFailedSyncPoisonsTheLogUntilRepairedAndTheEntryIsGone) {
  bool fail_sync = false;
  options_.fault = FailSyncWhile(&fail_sync);
  {
    std::unique_ptr<LocalLog> log = OpenLogOrDie(options_);
    AppendEntries(*log, 3, 50);
    fail_sync = true;
    absl::StatusOr<uint64_t> failed = log->Append("lost");
    ASSERT_FALSE(failed.ok());
    EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(failed.status().message(), HasSubstr("injected EIO"));
    fail_sync = false;
    // Still poisoned, with the sync working again.
    EXPECT_FALSE(log->Append("refused").ok());
    EXPECT_FALSE(log->poisoned().ok());
    EXPECT_EQ(log->last_position(), 3u);
    // A repair that fails leaves it poisoned.
    fail_sync = true;
    EXPECT_FALSE(log->Repair().ok());
    EXPECT_FALSE(log->poisoned().ok());
    fail_sync = false;
    ASSERT_TRUE(log->Repair().ok());
    EXPECT_TRUE(log->poisoned().ok());
    EXPECT_EQ(log->Append("kept").value_or(0), 4u);
  }
  options_.fault = nullptr;
  std::unique_ptr<LocalLog> log = OpenLogOrDie(options_);
  const auto all = ReadAllEntries(*log, 1);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[3].second, "kept");
}

// Without a sync per append (durability async, a replica's mirror), the log syncs when asked
// (Sync: a checkpoint, a snapshot) and when it leaves a segment, so that no segment's entries
// are durable while an earlier segment's may not be.
TEST_F(LocalLogTest, UnsyncedAppendsAreSyncedBySyncAndByEachRoll) {
  options_.sync = false;
  int syncs = 0;
  options_.fault = [&](absl::string_view step) {
    if (step == "sync") ++syncs;
    return absl::OkStatus();
  };
  std::unique_ptr<LocalLog> log = OpenLogOrDie(options_);
  AppendEntries(*log, 5, 50);
  EXPECT_EQ(syncs, 0);
  ASSERT_TRUE(log->Sync().ok());
  EXPECT_EQ(syncs, 1);
  // Entries that fill segments: one sync per segment left behind.
  const size_t segments_before = log->SegmentCount();
  AppendEntries(*log, 40, 200);
  const size_t rolls = log->SegmentCount() - segments_before;
  ASSERT_GE(rolls, 2u);
  EXPECT_EQ(syncs, 1 + static_cast<int>(rolls));
}

// A failed Sync leaves no entry to zero: what it covered may be lost anywhere, so the log stays
// poisoned (Repair refuses) until a restart recovers it, which keeps every entry that is whole.
TEST_F(LocalLogTest, AFailedSyncOfUnsyncedAppendsPoisonsTheLogUntilARestart) {
  options_.sync = false;
  bool fail_sync = false;
  options_.fault = FailSyncWhile(&fail_sync);
  {
    std::unique_ptr<LocalLog> log = OpenLogOrDie(options_);
    AppendEntries(*log, 3, 50);
    fail_sync = true;
    const absl::Status synced = log->Sync();
    EXPECT_EQ(synced.code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(synced.message(), HasSubstr("injected EIO"));
    fail_sync = false;
    EXPECT_FALSE(log->Append("refused").ok());
    EXPECT_FALSE(log->Repair().ok());
    EXPECT_FALSE(log->Sync().ok());  // A later sync that works proves nothing.
    EXPECT_THAT(log->poisoned().message(), HasSubstr("starts again"));
    EXPECT_EQ(log->last_position(), 3u);
  }
  options_.fault = nullptr;
  std::unique_ptr<LocalLog> log = OpenLogOrDie(options_);
  EXPECT_EQ(ReadAllEntries(*log, 1).size(), 3u);
  EXPECT_EQ(log->Append("after the restart").value_or(0), 4u);
}

TEST_F(LocalLogTest, ANewSegmentThatCannotBeMadeRefusesTheAppendWithoutPoisoning) {
  bool full = false;
  options_.fault = [&](absl::string_view step) {
    if (step == "segment" && full) return absl::UnavailableError("the filesystem is full (ENOSPC)");
    return absl::OkStatus();
  };
  std::unique_ptr<LocalLog> log = OpenLogOrDie(options_);
  full = true;
  int refused = 0;
  for (int i = 0; i < 100 && refused == 0; ++i) {
    if (!log->Append(std::string(200, 'y')).ok()) ++refused;
  }
  EXPECT_EQ(refused, 1);
  EXPECT_TRUE(log->poisoned().ok());
  const uint64_t before = log->last_position();
  full = false;
  EXPECT_EQ(log->Append("room again").value_or(0), before + 1);
  for (const auto& file : std::filesystem::directory_iterator(options_.dir)) {
    EXPECT_THAT(file.path().string(), ::testing::EndsWith(".seg"));  // No unfinished segment.
  }
}

TEST_F(LocalLogTest, DropBeforeDeletesWholeSegmentsBehindThePositionOnly) {
  std::unique_ptr<LocalLog> log = OpenLogOrDie(options_);
  AppendEntries(*log, 100, 200);
  const std::vector<std::string> before = log->SegmentPaths();
  ASSERT_GE(before.size(), 4u);
  EXPECT_EQ(log->DropBefore(1).value_or(-1), 0);
  const int dropped = log->DropBefore(50).value_or(-1);
  EXPECT_GT(dropped, 0);
  EXPECT_EQ(static_cast<size_t>(dropped) + log->SegmentPaths().size(), before.size());
  EXPECT_LE(log->first_position(), 50u);
  EXPECT_GT(log->first_position(), 1u);
  EXPECT_FALSE(std::filesystem::exists(before.front()));
  const auto kept = ReadAllEntries(*log, 50);
  EXPECT_EQ(kept.size(), 51u);
  EXPECT_EQ(log->ReadFrom(1, [](uint64_t, absl::string_view) { return absl::OkStatus(); }).code(),
            absl::StatusCode::kOutOfRange);
  // Never the segment being written, even past the last position.
  EXPECT_GE(log->DropBefore(1000).value_or(-1), 0);
  EXPECT_EQ(log->SegmentPaths().size(), 1u);
  const uint64_t first = log->first_position();
  log.reset();
  log = OpenLogOrDie(options_);
  EXPECT_EQ(log->first_position(), first);
  EXPECT_EQ(log->last_position(), 100u);
  EXPECT_EQ(log->Append("on").value_or(0), 101u);
}

// The applier makes the next segment ahead of time; the append that fills the current one takes
// it (and the one after that, with no spare ready, makes its own).
TEST_F(LocalLogTest, AFullSegmentIsFollowedByTheSpareMadeAhead) {
  std::vector<std::string> written;
  {
    std::unique_ptr<LocalLog> log = OpenLogOrDie(options_);
    ASSERT_TRUE(log->PrepareSpare().ok());
    ASSERT_TRUE(log->PrepareSpare().ok());  // Ready already: nothing more.
    EXPECT_TRUE(std::filesystem::exists(options_.dir + "/spare.seg.tmp"));
    written = AppendEntries(*log, 40, 200);  // 18 entries of 216 bytes fill 4 KiB: 2 rolls.
    EXPECT_FALSE(std::filesystem::exists(options_.dir + "/spare.seg.tmp"));
    EXPECT_EQ(log->SegmentCount(), 3u);
    ASSERT_TRUE(log->PrepareSpare().ok());
  }
  std::unique_ptr<LocalLog> log = OpenLogOrDie(options_);
  EXPECT_FALSE(std::filesystem::exists(options_.dir + "/spare.seg.tmp"));  // Removed at open.
  const auto all = ReadAllEntries(*log, 1);
  ASSERT_EQ(all.size(), 40u);
  EXPECT_EQ(all[39].second, written[39]);
}

TEST_F(LocalLogTest, ASegmentWhoseMakingWasCutShortIsRemovedAtOpen) {
  WriteLogFile(options_.dir + "/00000000000000000009.seg.tmp", std::string(100, 'z'));
  std::unique_ptr<LocalLog> log = OpenLogOrDie(options_);
  EXPECT_FALSE(std::filesystem::exists(options_.dir + "/00000000000000000009.seg.tmp"));
  EXPECT_EQ(log->Append("one").value_or(0), 1u);
}

TEST_F(LocalLogTest, ALogWithoutSegmentsIsRefused) {
  std::filesystem::remove(FirstSegment());
  absl::StatusOr<std::unique_ptr<LocalLog>> log = LocalLog::Open(options_);
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(log.status().message(), HasSubstr("has no segment file"));
}

}  // namespace
}  // namespace ledger::storage
