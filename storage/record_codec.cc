#include "storage/record_codec.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/check.h"
#include "storage/ledger_records.pb.h"

namespace ledger::storage {
namespace {

constexpr char kSeparator = '\0';

// The encoders write only what the decoders read back: a record that recovery would refuse as
// DataLoss is a bug in the shard, so it stops the process at write time, not at the next start.
v1::StoredOp ToStored(Op op) {
  LEDGER_CHECK(op == Op::kDeposit || op == Op::kWithdraw);
  return op == Op::kWithdraw ? v1::STORED_OP_WITHDRAW : v1::STORED_OP_DEPOSIT;
}

v1::StoredOp ToStored(EntryKind kind) {
  switch (kind) {
    case EntryKind::kDeposit:
      return v1::STORED_OP_DEPOSIT;
    case EntryKind::kWithdraw:
      return v1::STORED_OP_WITHDRAW;
    case EntryKind::kTransferOut:
      return v1::STORED_OP_TRANSFER_OUT;
    case EntryKind::kTransferIn:
      return v1::STORED_OP_TRANSFER_IN;
    case EntryKind::kTransferRefund:
      return v1::STORED_OP_TRANSFER_REFUND;
  }
  LEDGER_CHECK(false && "an entry kind without a stored op");
  return v1::STORED_OP_UNSPECIFIED;
}

std::optional<EntryKind> KindFromStored(v1::StoredOp op) {
  switch (op) {
    case v1::STORED_OP_DEPOSIT:
      return EntryKind::kDeposit;
    case v1::STORED_OP_WITHDRAW:
      return EntryKind::kWithdraw;
    case v1::STORED_OP_TRANSFER_OUT:
      return EntryKind::kTransferOut;
    case v1::STORED_OP_TRANSFER_IN:
      return EntryKind::kTransferIn;
    case v1::STORED_OP_TRANSFER_REFUND:
      return EntryKind::kTransferRefund;
    default:
      return std::nullopt;
  }
}

std::optional<Op> FromStored(v1::StoredOp op) {
  switch (op) {
    case v1::STORED_OP_DEPOSIT:
      return Op::kDeposit;
    case v1::STORED_OP_WITHDRAW:
      return Op::kWithdraw;
    default:
      return std::nullopt;
  }
}

v1::StoredOutcome ToStored(Outcome outcome) {
  switch (outcome) {
    case Outcome::kOk:
      return v1::STORED_OUTCOME_OK;
    case Outcome::kAccountNotFound:
      return v1::STORED_OUTCOME_ACCOUNT_NOT_FOUND;
    case Outcome::kInsufficientFunds:
      return v1::STORED_OUTCOME_INSUFFICIENT_FUNDS;
    case Outcome::kOverflow:
      return v1::STORED_OUTCOME_OVERFLOW;
    case Outcome::kCounterpartyNotFound:
      return v1::STORED_OUTCOME_COUNTERPARTY_NOT_FOUND;
    case Outcome::kTransferIdReused:
      return v1::STORED_OUTCOME_TRANSFER_ID_REUSED;
    default:
      LEDGER_CHECK(false && "only the rules' outcomes are recorded");
      return v1::STORED_OUTCOME_UNSPECIFIED;
  }
}

std::optional<Outcome> FromStored(v1::StoredOutcome outcome) {
  switch (outcome) {
    case v1::STORED_OUTCOME_OK:
      return Outcome::kOk;
    case v1::STORED_OUTCOME_ACCOUNT_NOT_FOUND:
      return Outcome::kAccountNotFound;
    case v1::STORED_OUTCOME_INSUFFICIENT_FUNDS:
      return Outcome::kInsufficientFunds;
    case v1::STORED_OUTCOME_OVERFLOW:
      return Outcome::kOverflow;
    case v1::STORED_OUTCOME_COUNTERPARTY_NOT_FOUND:
      return Outcome::kCounterpartyNotFound;
    case v1::STORED_OUTCOME_TRANSFER_ID_REUSED:
      return Outcome::kTransferIdReused;
    default:
      return std::nullopt;
  }
}

template <typename Proto>
absl::StatusOr<Proto> Parse(absl::string_view value, absl::string_view what) {
  Proto proto;
  if (!proto.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
    return absl::DataLossError(absl::StrCat("a stored ", what, " record does not decode"));
  }
  return proto;
}

}  // namespace

std::string AccountKey(absl::string_view account_id) { return std::string(account_id); }

std::string JournalPrefix(absl::string_view account_id) {
  return absl::StrCat(account_id, absl::string_view(&kSeparator, 1));
}

std::string JournalKey(absl::string_view account_id, uint64_t sequence) {
  std::string key = JournalPrefix(account_id);
  // Big-endian, so that the keys of one account sort by sequence number.
  for (int shift = 56; shift >= 0; shift -= 8) {
    key.push_back(static_cast<char>((sequence >> shift) & 0xFF));
  }
  return key;
}

std::optional<uint64_t> JournalKeySequence(absl::string_view key) {
  if (key.size() < 9 || key[key.size() - 9] != kSeparator) return std::nullopt;
  uint64_t sequence = 0;
  for (size_t i = key.size() - 8; i < key.size(); ++i) {
    sequence = (sequence << 8) | static_cast<unsigned char>(key[i]);
  }
  return sequence;
}

std::string RequestKey(absl::string_view account_id, absl::string_view request_id) {
  return absl::StrCat(account_id, absl::string_view(&kSeparator, 1), request_id);
}

std::string TransferKey(absl::string_view transfer_id) {
  return absl::StrCat("t", absl::string_view(&kSeparator, 1), transfer_id);
}

std::string PendingTransferPrefix() { return std::string("p") + kSeparator; }

std::string PendingTransferKey(absl::string_view transfer_id, absl::string_view from) {
  return absl::StrCat(PendingTransferPrefix(), transfer_id, absl::string_view(&kSeparator, 1),
                      from);
}

std::string PendingTransferId(absl::string_view key) {
  const std::string prefix = PendingTransferPrefix();
  if (key.size() <= prefix.size() || key.substr(0, prefix.size()) != prefix) return {};
  const absl::string_view rest = key.substr(prefix.size());
  const size_t separator = rest.find(kSeparator);
  return separator == absl::string_view::npos ? std::string()
                                              : std::string(rest.substr(0, separator));
}

std::string CreditKey(absl::string_view transfer_id) {
  return absl::StrCat("c", absl::string_view(&kSeparator, 1), transfer_id);
}

std::string EncodeAccount(const AccountState& state) {
  v1::AccountValue value;
  value.set_balance(state.balance);
  value.set_sequence(state.sequence);
  return value.SerializeAsString();
}

std::string EncodeJournal(const JournalEntry& entry) {
  v1::JournalValue value;
  value.set_op(ToStored(entry.kind));
  value.set_amount(entry.amount);
  value.set_balance_after(entry.balance_after);
  // Protobuf only logs a string that is not UTF-8, and the decoder then refuses the record.
  LEDGER_CHECK(entry.request_id.empty() || ValidateRequestId(entry.request_id) == Outcome::kOk);
  value.set_request_id(entry.request_id);
  value.set_unix_micros(absl::ToUnixMicros(entry.time));
  LEDGER_CHECK(entry.counterparty.empty() || ValidateAccountId(entry.counterparty) == Outcome::kOk);
  value.set_counterparty(entry.counterparty);
  return value.SerializeAsString();
}

std::string EncodeRequest(const RequestRecord& record) {
  v1::RequestValue value;
  value.set_op(ToStored(record.op));
  value.set_amount(record.amount);
  value.set_outcome(ToStored(record.outcome));
  value.set_balance(record.balance);
  value.set_recorded_unix_micros(absl::ToUnixMicros(record.recorded_at));
  return value.SerializeAsString();
}

absl::StatusOr<AccountState> DecodeAccount(absl::string_view value) {
  absl::StatusOr<v1::AccountValue> proto = Parse<v1::AccountValue>(value, "account");
  if (!proto.ok()) return proto.status();
  return AccountState{.balance = proto->balance(), .sequence = proto->sequence()};
}

absl::StatusOr<JournalEntry> DecodeJournal(absl::string_view value) {
  absl::StatusOr<v1::JournalValue> proto = Parse<v1::JournalValue>(value, "journal");
  if (!proto.ok()) return proto.status();
  std::optional<EntryKind> kind = KindFromStored(proto->op());
  if (!kind.has_value()) return absl::DataLossError("a stored journal record has no operation");
  // The encoder writes only valid ids; anything else did not come from it.
  if (ValidateRequestId(proto->request_id()) != Outcome::kOk) {
    return absl::DataLossError("a stored journal record has an invalid request_id");
  }
  if (!proto->counterparty().empty() && ValidateAccountId(proto->counterparty()) != Outcome::kOk) {
    return absl::DataLossError("a stored journal record has an invalid counterparty");
  }
  return JournalEntry{.account_id = {},
                      .sequence = 0,
                      .kind = *kind,
                      .amount = proto->amount(),
                      .balance_after = proto->balance_after(),
                      .request_id = proto->request_id(),
                      .time = absl::FromUnixMicros(proto->unix_micros()),
                      .counterparty = proto->counterparty()};
}

absl::StatusOr<RequestRecord> DecodeRequest(absl::string_view value) {
  absl::StatusOr<v1::RequestValue> proto = Parse<v1::RequestValue>(value, "request");
  if (!proto.ok()) return proto.status();
  std::optional<Op> op = FromStored(proto->op());
  std::optional<Outcome> outcome = FromStored(proto->outcome());
  if (!op.has_value() || !outcome.has_value()) {
    return absl::DataLossError("a stored request record has no operation or outcome");
  }
  return RequestRecord{.op = *op,
                       .amount = proto->amount(),
                       .outcome = *outcome,
                       .balance = proto->balance(),
                       .recorded_at = absl::FromUnixMicros(proto->recorded_unix_micros())};
}

namespace {

v1::StoredTransferState ToStored(TransferState state) {
  switch (state) {
    case TransferState::kPending:
      return v1::STORED_TRANSFER_STATE_PENDING;
    case TransferState::kCommitted:
      return v1::STORED_TRANSFER_STATE_COMMITTED;
    case TransferState::kRefused:
      return v1::STORED_TRANSFER_STATE_REFUSED;
  }
  return v1::STORED_TRANSFER_STATE_UNSPECIFIED;
}

std::optional<TransferState> FromStored(v1::StoredTransferState state) {
  switch (state) {
    case v1::STORED_TRANSFER_STATE_PENDING:
      return TransferState::kPending;
    case v1::STORED_TRANSFER_STATE_COMMITTED:
      return TransferState::kCommitted;
    case v1::STORED_TRANSFER_STATE_REFUSED:
      return TransferState::kRefused;
    default:
      return std::nullopt;
  }
}

int64_t MicrosOrZero(absl::Time time) {
  return time == absl::InfinitePast() ? 0 : absl::ToUnixMicros(time);
}

absl::Time TimeOrPast(int64_t micros) {
  return micros == 0 ? absl::InfinitePast() : absl::FromUnixMicros(micros);
}

}  // namespace

std::string EncodeTransfer(const TransferRecord& record) {
  v1::TransferValue value;
  LEDGER_CHECK(ValidateAccountId(record.from) == Outcome::kOk);
  LEDGER_CHECK(ValidateAccountId(record.to) == Outcome::kOk);
  value.set_from_account_id(record.from);
  value.set_to_account_id(record.to);
  value.set_amount(record.amount);
  value.set_state(ToStored(record.state));
  if (record.state == TransferState::kRefused) value.set_outcome(ToStored(record.outcome));
  value.set_from_balance(record.from_balance);
  value.set_to_balance(record.to_balance);
  value.set_created_unix_micros(absl::ToUnixMicros(record.created_at));
  value.set_credited_unix_micros(MicrosOrZero(record.credited_at));
  value.set_finished_unix_micros(MicrosOrZero(record.finished_at));
  return value.SerializeAsString();
}

std::string EncodeCredit(const CreditReceipt& receipt) {
  v1::CreditValue value;
  value.set_outcome(ToStored(receipt.outcome));
  value.set_to_balance(receipt.to_balance);
  value.set_amount(receipt.amount);
  value.set_credited_unix_micros(absl::ToUnixMicros(receipt.credited_at));
  LEDGER_CHECK(ValidateAccountId(receipt.from) == Outcome::kOk);
  value.set_from_account_id(receipt.from);
  return value.SerializeAsString();
}

absl::StatusOr<TransferRecord> DecodeTransfer(absl::string_view value) {
  absl::StatusOr<v1::TransferValue> proto = Parse<v1::TransferValue>(value, "transfer");
  if (!proto.ok()) return proto.status();
  std::optional<TransferState> state = FromStored(proto->state());
  if (!state.has_value() || ValidateAccountId(proto->from_account_id()) != Outcome::kOk ||
      ValidateAccountId(proto->to_account_id()) != Outcome::kOk || proto->amount() <= 0) {
    return absl::DataLossError("a stored transfer record is not valid");
  }
  TransferRecord record{.from = proto->from_account_id(),
                        .to = proto->to_account_id(),
                        .amount = proto->amount(),
                        .state = *state,
                        .from_balance = proto->from_balance(),
                        .to_balance = proto->to_balance(),
                        .created_at = absl::FromUnixMicros(proto->created_unix_micros()),
                        .credited_at = TimeOrPast(proto->credited_unix_micros()),
                        .finished_at = TimeOrPast(proto->finished_unix_micros())};
  if (*state == TransferState::kRefused) {
    std::optional<Outcome> outcome = FromStored(proto->outcome());
    if (!outcome.has_value() || *outcome == Outcome::kOk) {
      return absl::DataLossError("a stored refused transfer has no outcome");
    }
    record.outcome = *outcome;
  }
  return record;
}

absl::StatusOr<CreditReceipt> DecodeCredit(absl::string_view value) {
  absl::StatusOr<v1::CreditValue> proto = Parse<v1::CreditValue>(value, "credit");
  if (!proto.ok()) return proto.status();
  std::optional<Outcome> outcome = FromStored(proto->outcome());
  if (!outcome.has_value() || proto->amount() <= 0 ||
      ValidateAccountId(proto->from_account_id()) != Outcome::kOk) {
    return absl::DataLossError("a stored credit receipt is not valid");
  }
  return CreditReceipt{.from = proto->from_account_id(),
                       .outcome = *outcome,
                       .to_balance = proto->to_balance(),
                       .amount = proto->amount(),
                       .credited_at = absl::FromUnixMicros(proto->credited_unix_micros())};
}

}  // namespace ledger::storage
