// RecentJournal: the journal entries since the last checkpoint, read by History until a checkpoint
// has written them to RocksDB.
#include "storage/recent_journal.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "storage/record_codec.h"

namespace ledger::storage {
namespace {

std::vector<uint64_t> Sequences(const std::map<uint64_t, std::string>& entries) {
  std::vector<uint64_t> sequences;
  for (const auto& [sequence, value] : entries) sequences.push_back(sequence);
  return sequences;
}

// What RecentJournal::ForEachInTableOrder writes, in its order.
std::vector<std::pair<std::string, std::string>> TableOrder(const RecentJournal::Entries& entries) {
  std::vector<std::pair<std::string, std::string>> table;
  EXPECT_TRUE(RecentJournal::ForEachInTableOrder(
      entries, [&](absl::string_view key, absl::string_view value) {
        table.emplace_back(key, value);
        return true;
      }));
  return table;
}

TEST(RecentJournalTest, EntriesAreReadByAccountThroughASequenceUntilAWrittenSealIsReleased) {
  RecentJournal journal;
  EXPECT_FALSE(journal.Add("not a journal key", "x"));
  for (uint64_t n = 1; n <= 3; ++n)
    ASSERT_TRUE(journal.Add(JournalKey("a", n), absl::StrCat("a", n)));
  ASSERT_TRUE(journal.Add(JournalKey("ab", 1), "ab1"));  // Another account sharing a's first byte.
  EXPECT_EQ(Sequences(journal.Read(JournalPrefix("a"), UINT64_MAX)),
            (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(Sequences(journal.Read(JournalPrefix("a"), 2)), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(journal.Read(JournalPrefix("ab"), UINT64_MAX).at(1), "ab1");
  EXPECT_EQ(journal.size(), 4u);
  EXPECT_EQ(journal.bytes(), 2 * 3 + 3);

  std::shared_ptr<const RecentJournal::Entries> sealed = journal.Seal();
  ASSERT_TRUE(journal.Add(JournalKey("a", 4), "a4"));
  // Sealed and new entries are read together.
  EXPECT_EQ(Sequences(journal.Read(JournalPrefix("a"), UINT64_MAX)),
            (std::vector<uint64_t>{1, 2, 3, 4}));
  // The table's keys are RocksDB's order: account by account, each by sequence.
  const auto table = TableOrder(*sealed);
  ASSERT_EQ(table.size(), 4u);
  EXPECT_EQ(table[0].first, JournalKey("a", 1));
  EXPECT_EQ(table[2].first, JournalKey("a", 3));
  EXPECT_EQ(table[2].second, "a3");
  EXPECT_EQ(table[3].first, JournalKey("ab", 1));
  // A write that fails stops the walk.
  int written = 0;
  EXPECT_FALSE(RecentJournal::ForEachInTableOrder(
      *sealed, [&](absl::string_view, absl::string_view) { return ++written < 2; }));
  EXPECT_EQ(written, 2);

  journal.Release(/*written=*/true);
  EXPECT_EQ(Sequences(journal.Read(JournalPrefix("a"), UINT64_MAX)), (std::vector<uint64_t>{4}));
  EXPECT_EQ(journal.size(), 1u);
  EXPECT_EQ(journal.bytes(), 2);
}

TEST(RecentJournalTest, AFailedCheckpointHoldsTheSealedEntriesAgainBeforeTheNewerOnes) {
  RecentJournal journal;
  ASSERT_TRUE(journal.Add(JournalKey("a", 1), "a1"));
  ASSERT_TRUE(journal.Add(JournalKey("a", 2), "a2"));
  (void)journal.Seal();
  ASSERT_TRUE(journal.Add(JournalKey("a", 3), "a3"));
  // A replay after the database was reopened writes an entry again: one entry, the newer value.
  ASSERT_TRUE(journal.Add(JournalKey("a", 3), "a3-again"));
  journal.Release(/*written=*/false);
  const std::map<uint64_t, std::string> entries = journal.Read(JournalPrefix("a"), UINT64_MAX);
  EXPECT_EQ(Sequences(entries), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(entries.at(3), "a3-again");
  EXPECT_EQ(journal.size(), 3u);
  EXPECT_EQ(journal.bytes(), 2 + 2 + 8);
  const auto table = TableOrder(*journal.Seal());
  ASSERT_EQ(table.size(), 3u);
  EXPECT_EQ(table[0].first, JournalKey("a", 1));
  EXPECT_EQ(table[2].first, JournalKey("a", 3));
}

// A log entry's journal entries are added at once; a key that is not a journal key is left out
// and counted, and the others are added.
TEST(RecentJournalTest, AnEntrysPutsAddedAtOnceLeaveOutWhatIsNotAJournalKey) {
  RecentJournal journal;
  const std::string a1 = JournalKey("a", 1), a2 = JournalKey("a", 2), b1 = JournalKey("b", 1);
  const std::vector<RecentJournal::Put> puts = {
      {.key = a1, .value = "a1"},
      {.key = "short", .value = "x"},
      {.key = b1, .value = "b1"},
      {.key = a2, .value = "a2"},
  };
  EXPECT_EQ(journal.Add(puts), 1u);
  EXPECT_EQ(Sequences(journal.Read(JournalPrefix("a"), UINT64_MAX)), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(journal.Read(JournalPrefix("b"), UINT64_MAX).at(1), "b1");
  EXPECT_EQ(journal.size(), 3u);
  EXPECT_EQ(journal.bytes(), 6);
}

}  // namespace
}  // namespace ledger::storage
