// Test helper: every account a store loads at start-up (LedgerStorage::ForEachAccount), by id; a
// failed load fails the calling test.
#ifndef LEDGER_TESTS_STORAGE_LOADED_ACCOUNTS_H_
#define LEDGER_TESTS_STORAGE_LOADED_ACCOUNTS_H_

#include <map>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "storage/ledger_storage.h"

namespace ledger::testing_util {

inline std::map<std::string, AccountState> LoadedAccounts(storage::LedgerStorage& store) {
  std::map<std::string, AccountState> accounts;
  const absl::Status loaded = store.ForEachAccount(
      [&](std::string id, const AccountState& state) { accounts[std::move(id)] = state; });
  EXPECT_TRUE(loaded.ok()) << loaded;
  return accounts;
}

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_STORAGE_LOADED_ACCOUNTS_H_
