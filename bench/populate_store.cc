// ledger-populate: fills a data directory with N accounts (each with one journal entry, as if it
// had received one deposit), straight through the store, so that start-up time and memory can be
// measured with a million accounts without a million RPCs first.
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "storage/rocksdb_store.h"

ABSL_FLAG(std::string, data_dir, "", "data directory to create (must be missing or empty)");
ABSL_FLAG(int64_t, accounts, 1'000'000, "accounts to write");
ABSL_FLAG(int64_t, batch, 10'000, "accounts per write");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("writes N accounts into a new ledgerd data directory");
  absl::ParseCommandLine(argc, argv);
  const std::string data_dir = absl::GetFlag(FLAGS_data_dir);
  const int64_t accounts = absl::GetFlag(FLAGS_accounts);
  const int64_t batch_size = absl::GetFlag(FLAGS_batch);
  if (data_dir.empty() || accounts < 1 || batch_size < 1) {
    std::cerr << "ledger-populate: need --data_dir, --accounts >= 1 and --batch >= 1\n";
    return 2;
  }
  ledger::storage::StoreOptions options;
  options.data_dir = data_dir;
  options.durability = ledger::storage::Durability::kAsync;
  options.created_by = "ledger-populate";
  if (absl::StatusOr<std::string> created = ledger::storage::RocksDbStore::Init(options);
      !created.ok()) {
    std::cerr << "ledger-populate: " << created.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<std::unique_ptr<ledger::storage::RocksDbStore>> store =
      ledger::storage::RocksDbStore::Open(options);
  if (!store.ok()) {
    std::cerr << "ledger-populate: " << store.status().message() << "\n";
    return 1;
  }
  const absl::Time start = absl::Now();
  ledger::BatchWrite write;
  for (int64_t i = 0; i < accounts; ++i) {
    const std::string id = absl::StrCat("acct-", i);
    const int64_t balance = 1000 + i % 1000;
    write.accounts.push_back({.account_id = id, .state = {.balance = balance, .sequence = 1}});
    write.journal.push_back({.account_id = id,
                             .sequence = 1,
                             .kind = ledger::EntryKind::kDeposit,
                             .amount = balance,
                             .balance_after = balance,
                             .request_id = absl::StrCat("populate-", i),
                             .time = start});
    if (static_cast<int64_t>(write.accounts.size()) == batch_size || i + 1 == accounts) {
      if (absl::Status status = (*store)->Write(write); !status.ok()) {
        std::cerr << "ledger-populate: " << status.message() << "\n";
        return 1;
      }
      write.clear();
    }
  }
  std::cout << "ledger-populate: wrote " << accounts << " accounts to " << data_dir << " in "
            << absl::FormatDuration(absl::Now() - start) << "\n";
  return 0;
}
