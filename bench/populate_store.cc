// ledger-populate: fills a data directory with N accounts (each with one journal entry, as if it
// had received one deposit), then optionally M Deposits spread over them (each with its journal
// entry and idempotency record, written as the server writes an Apply call's part), straight
// through the store, so that start-up time, memory and disk can be measured with a million
// accounts and twenty million operations without that many RPCs first.
//
// --stop=clean closes the store as ledgerd's clean stop does (a checkpoint); --stop=kill exits
// without closing anything, as a SIGKILL would, once the log holds 95% of what it held between
// the last two checkpoints (the most a restart can have to replay, short of the next checkpoint).
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

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
ABSL_FLAG(int64_t, operations, 0, "Deposits to write after the accounts");
ABSL_FLAG(int64_t, operations_per_write, 1'000, "Deposits per write (an Apply call's part)");
ABSL_FLAG(std::string, stop, "clean",
          "clean: close the store (a checkpoint); kill: exit without closing, the log holding "
          "95% of what it held between the last two checkpoints");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("writes N accounts into a new ledgerd data directory");
  absl::ParseCommandLine(argc, argv);
  const std::string data_dir = absl::GetFlag(FLAGS_data_dir);
  const int64_t accounts = absl::GetFlag(FLAGS_accounts);
  const int64_t batch_size = absl::GetFlag(FLAGS_batch);
  const int64_t operations = absl::GetFlag(FLAGS_operations);
  const int64_t per_write = absl::GetFlag(FLAGS_operations_per_write);
  const std::string stop = absl::GetFlag(FLAGS_stop);
  if (data_dir.empty() || accounts < 1 || batch_size < 1 || operations < 0 || per_write < 1 ||
      (stop != "clean" && stop != "kill")) {
    std::cerr << "ledger-populate: need --data_dir, --accounts >= 1, --batch >= 1, "
                 "--operations >= 0, --operations_per_write >= 1 and --stop=clean|kill\n";
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
  if (operations == 0 && stop == "clean") return 0;

  // Deposits of 1 to accounts in a fixed scattered order, as the states they leave.
  std::vector<ledger::AccountState> states(static_cast<size_t>(accounts));
  for (int64_t i = 0; i < accounts; ++i) states[i] = {.balance = 1000 + i % 1000, .sequence = 1};
  const absl::Time operations_start = absl::Now();
  int64_t written = 0;
  // Operations written when each of the last two checkpoints was first seen.
  int64_t previous_checkpoint_at = -1;
  int64_t last_checkpoint_at = -1;
  uint64_t checkpoints_seen = (*store)->checkpoints();
  const auto write_operations = [&](int64_t count) -> bool {
    for (int64_t i = 0; i < count; ++i) {
      const int64_t n = written + i;
      const size_t account = static_cast<size_t>((n * 7919) % accounts);
      ledger::AccountState& state = states[account];
      state.balance += 1;
      state.sequence += 1;
      const std::string id = absl::StrCat("acct-", account);
      const std::string request_id = absl::StrCat("op-", n);
      write.accounts.push_back({.account_id = id, .state = state});
      write.journal.push_back({.account_id = id,
                               .sequence = state.sequence,
                               .kind = ledger::EntryKind::kDeposit,
                               .amount = 1,
                               .balance_after = state.balance,
                               .request_id = request_id,
                               .time = absl::Now()});
      write.requests.push_back({.account_id = id,
                                .request_id = request_id,
                                .record = {.op = ledger::Op::kDeposit,
                                           .amount = 1,
                                           .outcome = ledger::Outcome::kOk,
                                           .balance = state.balance,
                                           .recorded_at = absl::Now()}});
    }
    written += count;
    absl::Status status = (*store)->Write(write);
    write.clear();
    if (!status.ok()) {
      std::cerr << "ledger-populate: " << status.message() << "\n";
      return false;
    }
    if (const uint64_t now = (*store)->checkpoints(); now != checkpoints_seen) {
      checkpoints_seen = now;
      previous_checkpoint_at = last_checkpoint_at;
      last_checkpoint_at = written;
    }
    return true;
  };
  while (written < operations) {
    if (!write_operations(std::min(per_write, operations - written))) return 1;
  }
  std::cout << "ledger-populate: wrote " << written << " Deposits in "
            << absl::FormatDuration(absl::Now() - operations_start) << ", "
            << (*store)->checkpoints() << " checkpoints\n";
  if (stop == "clean") return 0;

  if (previous_checkpoint_at < 0) {
    std::cerr << "ledger-populate: --stop=kill needs enough --operations for two checkpoints\n";
    return 2;
  }
  const int64_t interval = last_checkpoint_at - previous_checkpoint_at;
  const int64_t target = interval * 95 / 100;
  while (written - last_checkpoint_at < target) {
    const uint64_t before = checkpoints_seen;
    if (!write_operations(per_write)) return 1;
    if (checkpoints_seen != before) {
      std::cerr << "ledger-populate: a checkpoint came early; stopping there\n";
      break;
    }
  }
  std::cout << "ledger-populate: killed with " << written - last_checkpoint_at
            << " Deposits written since the last checkpoint (" << interval
            << " between the last two), " << written << " in all\n"
            << std::flush;
  std::_Exit(0);  // As a SIGKILL: no destructor, no checkpoint, no flush.
}
