// Defines `LedgerStore`, the interface through which a shard makes its batches durable, and the
// records it writes: account states, journal entries and idempotency records.
//
// shard/ knows only this interface; storage/ implements it on RocksDB, and tests implement it in
// memory (with injected failures). Keys are per account, never per shard, so a restart with a
// different shard count finds every account again.
#ifndef LEDGER_SHARD_LEDGER_STORE_H_
#define LEDGER_SHARD_LEDGER_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "shard/ledger_rules.h"

namespace ledger {

// What a shard keeps for one account.
struct AccountState {
  int64_t balance = 0;
  // The sequence number of the account's newest journal entry; entries are numbered from 1.
  uint64_t sequence = 0;

  friend bool operator==(const AccountState&, const AccountState&) = default;
};

// One applied operation, as History shows it.
struct JournalEntry {
  std::string account_id;
  uint64_t sequence = 0;
  Op op = Op::kDeposit;
  int64_t amount = 0;
  int64_t balance_after = 0;
  std::string request_id;  // Empty when the call carried none.
  absl::Time time;

  friend bool operator==(const JournalEntry&, const JournalEntry&) = default;
};

// The recorded outcome of a Deposit or Withdraw that carried a request_id.
struct RequestRecord {
  Op op = Op::kDeposit;
  int64_t amount = 0;
  // One of the rules' outcomes: kOk, kAccountNotFound, kInsufficientFunds or kOverflow.
  Outcome outcome = Outcome::kOk;
  int64_t balance = 0;  // The Reply's balance.
  absl::Time recorded_at;

  friend bool operator==(const RequestRecord&, const RequestRecord&) = default;
};

struct AccountWrite {
  std::string account_id;
  AccountState state;
};

struct RequestWrite {
  std::string account_id;
  std::string request_id;
  RequestRecord record;
};

// Everything one batch changed. Written all or nothing. Later entries for the same key win.
struct BatchWrite {
  std::vector<AccountWrite> accounts;
  std::vector<JournalEntry> journal;
  std::vector<RequestWrite> requests;

  bool empty() const { return accounts.empty() && journal.empty() && requests.empty(); }
  void clear() {
    accounts.clear();
    journal.clear();
    requests.clear();
  }
};

// What a lookup that must not wait for the disk found.
struct MemoryLookup {
  // False when the answer is only on disk: nothing else is set, and the caller must ask
  // FindRequest from a thread that may block.
  bool answered = false;
  std::optional<RequestRecord> record;  // When answered: the record, or nullopt when none.
};

// Implementations are thread-safe: the commit pipeline writes while shards look up records and
// accounts.
class LedgerStore {
 public:
  virtual ~LedgerStore() = default;

  // Writes every batch of the group atomically, in one write and, as far as the store's
  // durability setting promises, durably (one sync for the whole group). On error nothing of
  // the group is stored. Later entries for the same key win, across batches too.
  virtual absl::Status WriteGroup(absl::Span<const BatchWrite* const> batches) = 0;

  // A group of one.
  absl::Status Write(const BatchWrite& batch) {
    const BatchWrite* const one[] = {&batch};
    return WriteGroup(one);
  }

  // The record written for (account_id, request_id), expired or not; nullopt when there is none.
  virtual absl::StatusOr<std::optional<RequestRecord>> FindRequest(
      absl::string_view account_id, absl::string_view request_id) = 0;

  // Like FindRequest, but never waits for the disk: answers from what the store holds in memory
  // (RocksDB: memtables, block cache, bloom filters), else says it cannot. Stores kept in memory
  // answer every lookup.
  virtual absl::StatusOr<MemoryLookup> FindRequestInMemory(absl::string_view account_id,
                                                           absl::string_view request_id) {
    absl::StatusOr<std::optional<RequestRecord>> found = FindRequest(account_id, request_id);
    if (!found.ok()) return found.status();
    return MemoryLookup{.answered = true, .record = *std::move(found)};
  }

  // The account's stored state; nullopt when it was never written.
  virtual absl::StatusOr<std::optional<AccountState>> FindAccount(absl::string_view account_id) = 0;
};

}  // namespace ledger

#endif  // LEDGER_SHARD_LEDGER_STORE_H_
