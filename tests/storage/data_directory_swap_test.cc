// The swap of a data directory's contents (storage/data_directory_swap.h): the new contents take
// the place of the old, what is kept stays, and a swap interrupted after its point of no return
// at each of its steps is finished by FinishDataDirectorySwap to the same end.
#include "storage/data_directory_swap.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "tests/scratch_dir.h"

namespace ledger::storage {
namespace {

namespace fs = std::filesystem;

void Write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// Every file under `dir`, by its path relative to it, with its text.
std::map<std::string, std::string> Files(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path());
    files[fs::relative(entry.path(), dir).string()] =
        std::string(std::istreambuf_iterator<char>(in), {});
  }
  return files;
}

class DataDirectorySwapTest : public ::testing::Test {
 protected:
  DataDirectorySwapTest() {
    Write(dir_ / "CURRENT", "old");
    Write(dir_ / "000004.log", "old log");
    Write(dir_ / "ledger_log" / "segment", "old entries");
    Write(dir_ / "raft" / "metadata1", "term and vote");
    Write(staged_ / "CURRENT", "new");
    Write(staged_ / "000009.sst", "new table");
    Write(staged_ / "ledger_log" / "segment", "new entries");
  }

  // The new contents, and the Raft directory kept from the old.
  const std::map<std::string, std::string> expected_ = {{"CURRENT", "new"},
                                                        {"000009.sst", "new table"},
                                                        {"ledger_log/segment", "new entries"},
                                                        {"raft/metadata1", "term and vote"}};
  const std::vector<std::string> keep_ = {"raft"};
  testing_util::ScratchDir scratch_;
  const fs::path dir_ = fs::path(scratch_.path()) / "data";
  const fs::path staged_ = dir_ / "state_transfer" / "restored";
};

TEST_F(DataDirectorySwapTest, TheNewContentsTakeThePlaceOfTheOldButTheKeptStay) {
  ASSERT_TRUE(SwapDataDirectoryContents(dir_.string(), staged_.string(), keep_).ok());
  EXPECT_EQ(Files(dir_), expected_);
  EXPECT_FALSE(fs::exists(dir_ / kSwapReadyDirectory));
  EXPECT_FALSE(fs::exists(dir_ / kSwapMovingDirectory));
  EXPECT_FALSE(fs::exists(dir_ / kSwapReplacedDirectory));
}

TEST_F(DataDirectorySwapTest, NothingToFinishChangesNothing) {
  const std::map<std::string, std::string> before = Files(dir_);
  ASSERT_TRUE(FinishDataDirectorySwap(dir_.string(), keep_).ok());
  EXPECT_EQ(Files(dir_), before);
}

TEST_F(DataDirectorySwapTest, ACrashRightAfterThePointOfNoReturnIsFinishedAtTheNextOpen) {
  fs::rename(staged_, dir_ / kSwapReadyDirectory);
  ASSERT_TRUE(FinishDataDirectorySwap(dir_.string(), keep_).ok());
  // The fetch's directory was old contents too: moved aside with them, and removed.
  EXPECT_EQ(Files(dir_), expected_);
}

TEST_F(DataDirectorySwapTest, ACrashWhileTheOldContentsMovedAsideIsFinished) {
  fs::rename(staged_, dir_ / kSwapReadyDirectory);
  fs::create_directories(dir_ / kSwapReplacedDirectory);
  fs::rename(dir_ / "CURRENT", dir_ / kSwapReplacedDirectory / "CURRENT");
  ASSERT_TRUE(FinishDataDirectorySwap(dir_.string(), keep_).ok());
  EXPECT_EQ(Files(dir_), expected_);
}

TEST_F(DataDirectorySwapTest, ACrashWhileTheNewContentsMovedUpIsFinished) {
  fs::rename(staged_, dir_ / kSwapReadyDirectory);
  fs::create_directories(dir_ / kSwapReplacedDirectory);
  for (const char* old : {"CURRENT", "000004.log", "ledger_log", "state_transfer"}) {
    fs::rename(dir_ / old, dir_ / kSwapReplacedDirectory / old);
  }
  fs::rename(dir_ / kSwapReadyDirectory, dir_ / kSwapMovingDirectory);
  fs::rename(dir_ / kSwapMovingDirectory / "CURRENT", dir_ / "CURRENT");
  ASSERT_TRUE(FinishDataDirectorySwap(dir_.string(), keep_).ok());
  EXPECT_EQ(Files(dir_), expected_);
  // Finished once, it is done: a second open finds nothing to do.
  ASSERT_TRUE(FinishDataDirectorySwap(dir_.string(), keep_).ok());
  EXPECT_EQ(Files(dir_), expected_);
}

TEST_F(DataDirectorySwapTest, AStagedDirectoryThatIsMissingIsAnErrorThatChangesNothing) {
  const std::map<std::string, std::string> before = Files(dir_);
  const absl::Status missing =
      SwapDataDirectoryContents(dir_.string(), (dir_ / "nowhere").string(), keep_);
  EXPECT_EQ(missing.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(missing.message().find("No such file or directory"), std::string::npos) << missing;
  EXPECT_EQ(Files(dir_), before);
}

}  // namespace
}  // namespace ledger::storage
