// Which file paths a backup may name: the server's bytes never choose where ledgerctl writes, nor
// what ledgerd restore reads.
#include "proto/backup_files.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ledger {
namespace {

TEST(BackupFilesTest, AcceptsTheDataDirectorysOwnNames) {
  for (const char* path : {"000012.sst", "CURRENT", "MANIFEST-000016", "OPTIONS-000018",
                           "000015.log", "ledger_log/00000000000000000051.seg"}) {
    EXPECT_TRUE(CheckBackupPath(path).ok()) << path;
  }
}

TEST(BackupFilesTest, RefusesAnyPathThatCouldLeaveTheDirectoryOrReplaceTheManifest) {
  for (const char* path :
       {"", "/etc/passwd", "../x", "ledger_log/../../x", "a/b/c", "..", ".", "a//b", "a/",
        "backup_manifest.json", "name with space", "tab\there", "new\nline", "ümlaut"}) {
    const absl::Status status = CheckBackupPath(path);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << path;
    EXPECT_THAT(status.message(), ::testing::HasSubstr("is not a file a backup may hold"));
  }
  EXPECT_FALSE(CheckBackupPath(std::string(129, 'a')).ok());
  EXPECT_TRUE(CheckBackupPath(std::string(128, 'a')).ok());
}

}  // namespace
}  // namespace ledger
