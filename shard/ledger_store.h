// Defines `LedgerStore`, the interface through which a shard makes its batches durable, and the
// records it writes: account states, journal entries and idempotency records.
//
// shard/ knows only this interface; storage/ implements it on RocksDB, and tests implement it in
// memory (with injected failures). Keys are per account, never per shard, so a restart with a
// different shard count finds every account again.
#ifndef LEDGER_SHARD_LEDGER_STORE_H_
#define LEDGER_SHARD_LEDGER_STORE_H_

#include <cstdint>
#include <functional>
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

// What a journal entry records. Deposits and withdrawals are the calls' own; a transfer writes
// kTransferOut on its source, kTransferIn on its destination and, when the destination refused
// it after the source was debited, kTransferRefund on the source.
enum class EntryKind : uint8_t { kDeposit, kWithdraw, kTransferOut, kTransferIn, kTransferRefund };

// One applied operation, as History shows it.
struct JournalEntry {
  std::string account_id;
  uint64_t sequence = 0;
  EntryKind kind = EntryKind::kDeposit;
  int64_t amount = 0;
  int64_t balance_after = 0;
  // The call's request_id (empty when it carried none); for a transfer's entries, its
  // transfer_id.
  std::string request_id;
  absl::Time time;
  // Transfers only: the other account.
  std::string counterparty = {};

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

// Where a transfer stands, as its source shard records it.
enum class TransferState : uint8_t {
  kPending,    // Debited from the source; the destination's credit is not yet confirmed.
  kCommitted,  // Both sides applied.
  kRefused,    // Nothing moved (or the debit was refunded); `outcome` says why.
};

// The record of one transfer, keyed by its transfer_id; written by the shard of its source
// account at each step. The truth about a transfer (GetTransfer reads it).
struct TransferRecord {
  std::string from;
  std::string to;
  int64_t amount = 0;
  TransferState state = TransferState::kPending;
  // kOk unless kRefused: kAccountNotFound (the source), kCounterpartyNotFound (the destination),
  // kInsufficientFunds or kOverflow (the destination's balance).
  Outcome outcome = Outcome::kOk;
  // The source's balance right after the debit (or, when refused at the source, the balance that
  // refused it); the destination's right after the credit (or the balance that refused it).
  int64_t from_balance = 0;
  int64_t to_balance = 0;
  absl::Time created_at = absl::InfinitePast();  // The source decided it.
  absl::Time credited_at =
      absl::InfinitePast();  // The destination credited or refused it; InfinitePast before.
  absl::Time finished_at =
      absl::InfinitePast();  // Committed or refused; InfinitePast while pending.

  friend bool operator==(const TransferRecord&, const TransferRecord&) = default;
};

// The destination's receipt of a transfer's credit, keyed by its transfer_id: what makes a
// credit sent twice (after a crash or a failed write) apply once.
struct CreditReceipt {
  // The transfer's source: a credit with the same transfer_id from another source (a reused id)
  // is refused, never taken for this one.
  std::string from = {};
  // kOk, kCounterpartyNotFound or kOverflow.
  Outcome outcome = Outcome::kOk;
  int64_t to_balance = 0;  // As in TransferRecord.
  int64_t amount = 0;      // Checked against the credit sent again.
  absl::Time credited_at = absl::InfinitePast();

  friend bool operator==(const CreditReceipt&, const CreditReceipt&) = default;
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

struct TransferWrite {
  std::string transfer_id;
  TransferRecord record;
  // A final record that replaces this source's pending one (a settle): the store drops the
  // pending one in the same write. False for a transfer decided final at once.
  bool ends_pending = false;
};

struct CreditWrite {
  std::string transfer_id;
  CreditReceipt receipt;
};

// Everything one batch changed. Written all or nothing. Later entries for the same key win.
struct BatchWrite {
  std::vector<AccountWrite> accounts;
  std::vector<JournalEntry> journal;
  std::vector<RequestWrite> requests;
  std::vector<TransferWrite> transfers;
  std::vector<CreditWrite> credits;

  bool empty() const {
    return accounts.empty() && journal.empty() && requests.empty() && transfers.empty() &&
           credits.empty();
  }
  void clear() {
    accounts.clear();
    journal.clear();
    requests.clear();
    transfers.clear();
    credits.clear();
  }
};

// What a lookup that must not wait for the disk found.
struct MemoryLookup {
  // False when the answer is only on disk: nothing else is set, and the caller must ask
  // FindRequest from a thread that may block.
  bool answered = false;
  std::optional<RequestRecord> record;  // When answered: the record, or nullopt when none.
};

// One request_id to look up (LedgerStore::FindRequests).
struct RequestKeyRef {
  absl::string_view account_id;
  absl::string_view request_id;
};

// The same for a transfer's record and a credit's receipt.
struct TransferLookup {
  bool answered = false;
  std::optional<TransferRecord> record = std::nullopt;
};
struct CreditLookup {
  bool answered = false;
  std::optional<CreditReceipt> receipt = std::nullopt;
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

  // How many group writes may be in flight at once (StartGroupWrite): 1 unless the store's log
  // commits by a round trip to other replicas, whose leader can send the next group while a
  // majority writes the one before (docs/replication.md 9.3).
  virtual int GroupWritesInFlight() const { return 1; }

  // WriteGroup without waiting: `written` is called once with its outcome, on any thread, and
  // perhaps before this returns. `batches` are read before it returns. Writes finish in the
  // order they were started, and once one fails, every write started after it fails too: each
  // may hold batches decided on top of it. `behind_writes_in_flight` says that writes started
  // earlier are not all finished and handled yet: a store whose log a failed write poisoned
  // must then refuse this write rather than repair the log under it.
  using GroupWritten = std::function<void(absl::Status outcome)>;
  // By value: overrides keep `written` until the write ends.
  virtual void StartGroupWrite(
      absl::Span<const BatchWrite* const> batches, bool behind_writes_in_flight,
      GroupWritten written) {       // NOLINT(performance-unnecessary-value-param)
    (void)behind_writes_in_flight;  // One write at a time: never.
    written(WriteGroup(batches));
  }

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

  // FindRequestInMemory for many request_ids at once, one answer per key and in their order;
  // with `may_block`, FindRequest for each (every answer then `answered`). A store may read them
  // together: RocksDB's MultiGet consults each table's filter and index once for the batch
  // rather than once per key. This default asks one at a time.
  virtual std::vector<absl::StatusOr<MemoryLookup>> FindRequests(
      absl::Span<const RequestKeyRef> keys, bool may_block) {
    std::vector<absl::StatusOr<MemoryLookup>> found;
    found.reserve(keys.size());
    for (const RequestKeyRef& key : keys) {
      if (!may_block) {
        found.push_back(FindRequestInMemory(key.account_id, key.request_id));
        continue;
      }
      absl::StatusOr<std::optional<RequestRecord>> record =
          FindRequest(key.account_id, key.request_id);
      if (record.ok()) {
        found.push_back(MemoryLookup{.answered = true, .record = *std::move(record)});
      } else {
        found.push_back(record.status());
      }
    }
    return found;
  }

  // The account's stored state; nullopt when it was never written.
  virtual absl::StatusOr<std::optional<AccountState>> FindAccount(absl::string_view account_id) = 0;

  // The stored record of a transfer; nullopt when none. With `from`: the record that source holds
  // as pending, if any, else the id's final record (whatever its source: the caller compares).
  // Without: the id's final record; a store may also answer a pending one. A pending record is
  // kept per (id, source), so that two sources that raced with one id (a client's mistake) each
  // keep theirs until it is final; a final one per id. The stored receipt of a
  // transfer's credit; nullopt when none. Neither expires. May read the disk: a shard calls them
  // only from Prefetch on a thread that may block, for a transfer memory does not hold.
  virtual absl::StatusOr<std::optional<TransferRecord>> FindTransfer(absl::string_view transfer_id,
                                                                     absl::string_view from) = 0;
  virtual absl::StatusOr<std::optional<CreditReceipt>> FindCredit(
      absl::string_view transfer_id) = 0;
  // Every pending record stored under the id, whatever its source (more than one only when a
  // client raced one id from two sources). What a shard reads back after a failed write.
  virtual absl::StatusOr<std::vector<TransferRecord>> FindPendingTransfers(
      absl::string_view transfer_id) = 0;
  // Like FindTransfer and FindCredit, but never wait for the disk (see FindRequestInMemory): a
  // transfer decided by a sender's thread (inline) needs them for its new transfer_id.
  virtual absl::StatusOr<TransferLookup> FindTransferInMemory(absl::string_view transfer_id,
                                                              absl::string_view from) {
    absl::StatusOr<std::optional<TransferRecord>> found = FindTransfer(transfer_id, from);
    if (!found.ok()) return found.status();
    return TransferLookup{.answered = true, .record = *std::move(found)};
  }
  virtual absl::StatusOr<CreditLookup> FindCreditInMemory(absl::string_view transfer_id) {
    absl::StatusOr<std::optional<CreditReceipt>> found = FindCredit(transfer_id);
    if (!found.ok()) return found.status();
    return CreditLookup{.answered = true, .receipt = *std::move(found)};
  }
};

}  // namespace ledger

#endif  // LEDGER_SHARD_LEDGER_STORE_H_
