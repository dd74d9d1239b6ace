// Fuzzes the storage record encoders (storage/record_codec.h) with structured values: for every
// record the shard can write, Decode(Encode(x)) is x, field for field; every key round-trips.
// The domain is what shard/shard.cc writes: journal entries and request records of Deposit or
// Withdraw, request outcomes kOk, kAccountNotFound, kInsufficientFunds or kOverflow (the ones
// RequestRecord documents), request ids that ValidateRequestId accepts, any int64 amounts,
// balances and times, any bytes in account ids. The encoders stop the process on anything outside
// it (a shard bug), so the target never encodes such a value. Transfer records and credit
// receipts likewise, in the domain shard/shard_core_transfers.cc writes.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fuzz/fuzz_check.h"
#include "google/protobuf/stubs/logging.h"
#include "shard/ledger_rules.h"
#include "shard/ledger_store.h"
#include "storage/record_codec.h"

namespace ledger::storage {
namespace {

// Long enough for the longest valid id (128 bytes) and beyond: the codec does not validate ids.
constexpr size_t kMaxStringBytes = 200;

absl::Time ConsumeTime(FuzzedDataProvider& input) {
  return absl::FromUnixMicros(input.ConsumeIntegral<int64_t>());
}

void CheckAccount(FuzzedDataProvider& input) {
  const AccountState state{.balance = input.ConsumeIntegral<int64_t>(),
                           .sequence = input.ConsumeIntegral<uint64_t>()};
  absl::StatusOr<AccountState> decoded = DecodeAccount(EncodeAccount(state));
  FUZZ_CHECK(decoded.ok());
  FUZZ_CHECK(*decoded == state);
}

void CheckJournal(FuzzedDataProvider& input) {
  // account_id and sequence live in the key, not the value: DecodeJournal leaves them empty.
  const JournalEntry entry{.account_id = {},
                           .sequence = 0,
                           .kind = input.PickValueInArray(
                               {EntryKind::kDeposit, EntryKind::kWithdraw, EntryKind::kTransferOut,
                                EntryKind::kTransferIn, EntryKind::kTransferRefund}),
                           .amount = input.ConsumeIntegral<int64_t>(),
                           .balance_after = input.ConsumeIntegral<int64_t>(),
                           .request_id = input.ConsumeRandomLengthString(kMaxStringBytes),
                           .time = ConsumeTime(input),
                           .counterparty = input.ConsumeRandomLengthString(kMaxStringBytes)};
  // The encoder refuses (fail stop) an id the front end would have refused: outside its domain.
  if (ValidateRequestId(entry.request_id) != Outcome::kOk) return;
  if (!entry.counterparty.empty() && ValidateAccountId(entry.counterparty) != Outcome::kOk) return;
  absl::StatusOr<JournalEntry> decoded = DecodeJournal(EncodeJournal(entry));
  FUZZ_CHECK(decoded.ok());
  FUZZ_CHECK(*decoded == entry);
}

void CheckRequest(FuzzedDataProvider& input) {
  const RequestRecord record{
      .op = input.PickValueInArray({Op::kDeposit, Op::kWithdraw}),
      .amount = input.ConsumeIntegral<int64_t>(),
      .outcome = input.PickValueInArray({Outcome::kOk, Outcome::kAccountNotFound,
                                         Outcome::kInsufficientFunds, Outcome::kOverflow}),
      .balance = input.ConsumeIntegral<int64_t>(),
      .recorded_at = ConsumeTime(input)};
  absl::StatusOr<RequestRecord> decoded = DecodeRequest(EncodeRequest(record));
  FUZZ_CHECK(decoded.ok());
  FUZZ_CHECK(*decoded == record);
}

// Transfer records and credit receipts, in the domain the shard writes: valid account ids, an
// amount > 0, a refusal outcome only when refused, times that are set or InfinitePast (not yet).
absl::Time ConsumeTimeOrNotYet(FuzzedDataProvider& input) {
  if (input.ConsumeBool()) return absl::InfinitePast();
  const int64_t micros = input.ConsumeIntegral<int64_t>();
  return absl::FromUnixMicros(micros == 0 ? 1 : micros);  // 0 is how "not yet" is stored.
}

void CheckTransfer(FuzzedDataProvider& input) {
  TransferRecord record{
      .from = input.ConsumeRandomLengthString(kMaxStringBytes),
      .to = input.ConsumeRandomLengthString(kMaxStringBytes),
      .amount = input.ConsumeIntegralInRange<int64_t>(1, std::numeric_limits<int64_t>::max()),
      .state = input.PickValueInArray(
          {TransferState::kPending, TransferState::kCommitted, TransferState::kRefused}),
      .outcome = Outcome::kOk,
      .from_balance = input.ConsumeIntegral<int64_t>(),
      .to_balance = input.ConsumeIntegral<int64_t>(),
      .created_at = ConsumeTime(input),
      .credited_at = ConsumeTimeOrNotYet(input),
      .finished_at = ConsumeTimeOrNotYet(input)};
  if (record.state == TransferState::kRefused) {
    record.outcome = input.PickValueInArray(
        {Outcome::kAccountNotFound, Outcome::kCounterpartyNotFound, Outcome::kInsufficientFunds,
         Outcome::kOverflow, Outcome::kTransferIdReused});
  }
  if (ValidateAccountId(record.from) != Outcome::kOk ||
      ValidateAccountId(record.to) != Outcome::kOk) {
    return;
  }
  absl::StatusOr<TransferRecord> decoded = DecodeTransfer(EncodeTransfer(record));
  FUZZ_CHECK(decoded.ok());
  FUZZ_CHECK(*decoded == record);

  const CreditReceipt receipt{
      .from = record.from,
      .outcome = input.PickValueInArray(
          {Outcome::kOk, Outcome::kCounterpartyNotFound, Outcome::kOverflow}),
      .to_balance = input.ConsumeIntegral<int64_t>(),
      .amount = record.amount,
      .credited_at = ConsumeTime(input)};
  absl::StatusOr<CreditReceipt> decoded_receipt = DecodeCredit(EncodeCredit(receipt));
  FUZZ_CHECK(decoded_receipt.ok());
  FUZZ_CHECK(*decoded_receipt == receipt);
  // A pending key names its transfer back, whatever the source.
  const std::string transfer_id = input.ConsumeRandomLengthString(kMaxStringBytes);
  if (ValidateTransferId(transfer_id) == Outcome::kOk) {
    FUZZ_CHECK(PendingTransferId(PendingTransferKey(transfer_id, record.from)) == transfer_id);
  }
}

void CheckKeys(FuzzedDataProvider& input) {
  // Any account id, even one with NUL bytes that validation would refuse: the sequence sits in
  // the last 8 bytes, after a separator at a fixed distance from the end.
  const std::string account_id = input.ConsumeRandomLengthString(kMaxStringBytes);
  const uint64_t sequence = input.ConsumeIntegral<uint64_t>();
  const std::string key = JournalKey(account_id, sequence);
  FUZZ_CHECK(JournalKeySequence(key) == sequence);
  FUZZ_CHECK(key.rfind(JournalPrefix(account_id), 0) == 0);
  FUZZ_CHECK(key.size() == account_id.size() + 9);
  // Big-endian sequences: an account's journal keys sort in sequence order, which History's
  // newest-first scan relies on.
  const uint64_t other = input.ConsumeIntegral<uint64_t>();
  FUZZ_CHECK((JournalKey(account_id, other) < key) == (other < sequence));
  // Every key of an account starts with its prefix, so one prefix scan finds them all.
  const std::string request_key = RequestKey(account_id, input.ConsumeRandomLengthString(16));
  FUZZ_CHECK(request_key.rfind(JournalPrefix(account_id), 0) == 0);
  FUZZ_CHECK(AccountKey(account_id) == account_id);
}

}  // namespace
}  // namespace ledger::storage

// Protobuf logs every string that is not UTF-8 it meets; the properties say what matters, and
// the log would bury libFuzzer's own output.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  ledger::storage::CheckAccount(input);
  ledger::storage::CheckJournal(input);
  ledger::storage::CheckRequest(input);
  ledger::storage::CheckKeys(input);
  ledger::storage::CheckTransfer(input);
  return 0;
}
