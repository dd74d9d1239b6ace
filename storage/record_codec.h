// Defines how ledgerd's records become RocksDB keys and values and back: the on-disk format,
// kept apart from the database plumbing in rocksdb_store.cc.
#ifndef LEDGER_STORAGE_RECORD_CODEC_H_
#define LEDGER_STORAGE_RECORD_CODEC_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "shard/ledger_store.h"

namespace ledger::storage {

// Account ids and request ids never contain a NUL byte (both are validated), so NUL separates
// an account id from what follows it, and "<account>\0" prefixes exactly that account's keys.
std::string AccountKey(absl::string_view account_id);
std::string JournalKey(absl::string_view account_id, uint64_t sequence);
std::string JournalPrefix(absl::string_view account_id);
std::string RequestKey(absl::string_view account_id, absl::string_view request_id);
// Transfer keys live in the default column family; "format" (the marker) has no NUL, so they
// never meet it. A pending transfer also has a key under the pending prefix.
std::string TransferKey(absl::string_view transfer_id);
std::string PendingTransferKey(absl::string_view transfer_id, absl::string_view from);
// The transfer id of a pending key; empty when `key` is not one.
std::string PendingTransferId(absl::string_view key);
std::string PendingTransferPrefix();
std::string CreditKey(absl::string_view transfer_id);

// The sequence number of a journal key; nullopt when `key` is not one.
std::optional<uint64_t> JournalKeySequence(absl::string_view key);

std::string EncodeAccount(const AccountState& state);
std::string EncodeJournal(const JournalEntry& entry);
std::string EncodeRequest(const RequestRecord& record);
std::string EncodeTransfer(const TransferRecord& record);
std::string EncodeCredit(const CreditReceipt& receipt);

// DataLoss naming the record when the bytes do not decode into a valid record.
absl::StatusOr<AccountState> DecodeAccount(absl::string_view value);
// Fills every field but account_id and sequence, which come from the key.
absl::StatusOr<JournalEntry> DecodeJournal(absl::string_view value);
absl::StatusOr<RequestRecord> DecodeRequest(absl::string_view value);
absl::StatusOr<TransferRecord> DecodeTransfer(absl::string_view value);
absl::StatusOr<CreditReceipt> DecodeCredit(absl::string_view value);

}  // namespace ledger::storage

#endif  // LEDGER_STORAGE_RECORD_CODEC_H_
