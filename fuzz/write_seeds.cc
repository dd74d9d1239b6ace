// ledger-fuzz-seeds: writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/) from the
// real encoders and protos, so that no seed is hand-typed binary. Regenerate after a change to a
// record, a request or a target's input layout:
//   build/fuzz/fuzz/ledger-fuzz-seeds fuzz/corpus
// Structured targets read their input through FuzzedDataProvider; their seeds are built by
// `ProviderInput`, which lays values out the way the provider reads them, and every seed is read
// back through a real FuzzedDataProvider before it is written.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "ledger/v1/ledger.pb.h"
#include "shard/ledger_rules.h"
#include "shard/ledger_store.h"
#include "storage/record_codec.h"

namespace {

using ledger::Op;
using ledger::Outcome;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

[[noreturn]] void Fail(const std::string& why) {
  std::fprintf(stderr, "ledger-fuzz-seeds: %s\n", why.c_str());
  std::exit(1);
}

// Lays out values so that FuzzedDataProvider returns them in the order they were added:
// integers are read from the end of the input, most significant byte first; strings from the
// front, a backslash doubled and "\\E" ending each one.
class ProviderInput {
 public:
  // Adds `value` as ConsumeIntegralInRange<T>(min, max) reads it.
  template <typename T>
  ProviderInput& Integral(T value, T min = std::numeric_limits<T>::min(),
                          T max = std::numeric_limits<T>::max()) {
    const uint64_t range = static_cast<uint64_t>(max) - static_cast<uint64_t>(min);
    const uint64_t offset = static_cast<uint64_t>(value) - static_cast<uint64_t>(min);
    int bytes = 0;
    while (bytes < static_cast<int>(sizeof(T)) && (range >> (8 * bytes)) > 0) ++bytes;
    for (int i = bytes - 1; i >= 0; --i) tail_.push_back(static_cast<char>(offset >> (8 * i)));
    return *this;
  }
  ProviderInput& Bool(bool value) { return Integral<uint8_t>(value ? 1 : 0); }
  // Adds the index of a PickValueInArray over `count` values.
  ProviderInput& Pick(size_t index, size_t count) { return Integral<size_t>(index, 0, count - 1); }
  ProviderInput& String(const std::string& value) {
    for (char c : value) {
      front_.push_back(c);
      if (c == '\\') front_.push_back('\\');
    }
    front_ += "\\E";
    return *this;
  }
  std::string Bytes() const { return front_ + std::string(tail_.rbegin(), tail_.rend()); }

 private:
  std::string front_;
  std::string tail_;  // In the order the provider reads it.
};

class CorpusWriter {
 public:
  explicit CorpusWriter(std::filesystem::path root) : root_(std::move(root)) {}

  void Write(const std::string& target, const std::string& name, const std::string& bytes) {
    const std::filesystem::path dir = root_ / target;
    std::filesystem::create_directories(dir);
    std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) Fail("cannot write " + (dir / name).string());
    ++written_;
  }
  int written() const { return written_; }

 private:
  std::filesystem::path root_;
  int written_ = 0;
};

const std::string kLongRequestId(ledger::kRequestIdMaxBytes, '~');
const std::string kLongAccountId(ledger::kAccountIdMaxBytes, 'z');

void WriteRecordSeeds(CorpusWriter& out) {
  namespace storage = ledger::storage;
  const std::string t = "fuzz_record_decode";
  out.Write(t, "account-zero", storage::EncodeAccount({.balance = 0, .sequence = 0}));
  out.Write(t, "account-typical", storage::EncodeAccount({.balance = 1500, .sequence = 7}));
  out.Write(t, "account-min", storage::EncodeAccount({.balance = kMin, .sequence = UINT64_MAX}));
  out.Write(t, "journal-deposit",
            storage::EncodeJournal({.kind = ledger::EntryKind::kDeposit,
                                    .amount = 100,
                                    .balance_after = 100,
                                    .request_id = "req-1",
                                    .time = absl::FromUnixMicros(1'700'000'000'000'000)}));
  out.Write(t, "journal-withdraw-edges",
            storage::EncodeJournal({.kind = ledger::EntryKind::kWithdraw,
                                    .amount = kMax,
                                    .balance_after = kMin,
                                    .request_id = kLongRequestId,
                                    .time = absl::FromUnixMicros(kMin)}));
  out.Write(t, "request-ok",
            storage::EncodeRequest({.op = Op::kDeposit,
                                    .amount = 5,
                                    .outcome = Outcome::kOk,
                                    .balance = 5,
                                    .recorded_at = absl::FromUnixMicros(1)}));
  out.Write(t, "request-insufficient",
            storage::EncodeRequest({.op = Op::kWithdraw,
                                    .amount = kMax,
                                    .outcome = Outcome::kInsufficientFunds,
                                    .balance = -1,
                                    .recorded_at = absl::FromUnixMicros(kMax)}));
  out.Write(t, "key-journal", storage::JournalKey("acct-1", 42));
  out.Write(t, "key-journal-max", storage::JournalKey(kLongAccountId, UINT64_MAX));
  out.Write(t, "key-request", storage::RequestKey("acct-1", "req-1"));
}

// Sends the request bytes to the method `selector` picks, as fuzz_request.cc reads them.
std::string ForMethod(uint8_t selector, const google::protobuf::MessageLite& request) {
  return std::string(1, static_cast<char>(selector)) + request.SerializeAsString();
}

void WriteRequestSeeds(CorpusWriter& out) {
  namespace v1 = ledger::v1;
  const std::string t = "fuzz_request";
  constexpr uint8_t kDeposit = 0, kWithdraw = 1, kBalance = 2, kHistory = 3, kRequireId = 4;
  v1::DepositRequest deposit;
  deposit.set_account_id("alice");
  deposit.set_amount(100);
  deposit.set_request_id("req-1");
  out.Write(t, "deposit", ForMethod(kDeposit, deposit));
  deposit.set_request_id("");
  out.Write(t, "deposit-no-request-id-required", ForMethod(kDeposit | kRequireId, deposit));
  deposit.set_account_id(kLongAccountId);
  deposit.set_amount(kMax);
  deposit.set_request_id(kLongRequestId);
  out.Write(t, "deposit-longest-ids", ForMethod(kDeposit, deposit));
  deposit.set_account_id("a/b");
  deposit.set_amount(0);
  out.Write(t, "deposit-bad-account-zero-amount", ForMethod(kDeposit, deposit));
  const std::string whole = ForMethod(kDeposit, deposit);
  out.Write(t, "deposit-truncated", whole.substr(0, whole.size() / 2));

  v1::WithdrawRequest withdraw;
  withdraw.set_account_id("bob@example.org");
  withdraw.set_amount(kMin);
  withdraw.set_request_id("r\x7f");
  out.Write(t, "withdraw-invalid", ForMethod(kWithdraw | kRequireId, withdraw));
  withdraw.set_amount(1);
  withdraw.set_request_id("x");
  out.Write(t, "withdraw", ForMethod(kWithdraw | kRequireId, withdraw));

  v1::BalanceRequest balance;
  balance.set_account_id("carol:1");
  out.Write(t, "balance", ForMethod(kBalance, balance));
  out.Write(t, "balance-not-utf8", std::string(1, kBalance) + "\x0a\x02\xc3\x28");

  v1::HistoryRequest history;
  history.set_account_id("dave");
  out.Write(t, "history-first-page", ForMethod(kHistory, history));
  history.set_page_size(1000);
  history.set_page_token("18446744073709551615");
  out.Write(t, "history-last-token", ForMethod(kHistory, history));
  history.set_page_size(1001);
  history.set_page_token("007");
  out.Write(t, "history-invalid", ForMethod(kHistory, history));

  constexpr uint8_t kApply = 16;
  v1::ApplyRequest apply;
  *apply.add_operations()->mutable_deposit() = deposit;
  v1::DepositRequest valid_deposit;
  valid_deposit.set_account_id("alice");
  valid_deposit.set_amount(5);
  valid_deposit.set_request_id("imp-1");
  *apply.add_operations()->mutable_deposit() = valid_deposit;
  *apply.add_operations()->mutable_withdraw() = withdraw;
  *apply.add_operations()->mutable_balance() = balance;
  v1::TransferRequest* transfer = apply.add_operations()->mutable_transfer();
  transfer->set_transfer_id("t-1");
  transfer->set_from_account_id("alice");
  transfer->set_to_account_id("bob@example.org");
  transfer->set_amount(3);
  apply.add_operations();  // Sets none of its fields.
  out.Write(t, "apply-every-kind", ForMethod(kApply | kRequireId, apply));
}

// One ApplyOperation input, laid out as fuzz_apply_operation.cc reads it.
std::string Operation(Op op, std::optional<int64_t> balance, int64_t amount, int64_t limit) {
  ProviderInput input;
  input.Pick(static_cast<size_t>(op), 3).Bool(balance.has_value());
  if (balance.has_value()) input.Integral<int64_t>(*balance);
  input.Integral<int64_t>(amount).Integral<int64_t>(limit, 0, kMax);
  std::string bytes = input.Bytes();
  // Read it back the way the target does, so a layout mistake fails here and not silently.
  FuzzedDataProvider check(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  const Op got_op = check.PickValueInArray({Op::kDeposit, Op::kWithdraw, Op::kBalance});
  const bool has_balance = check.ConsumeBool();
  const int64_t got_balance = has_balance ? check.ConsumeIntegral<int64_t>() : 0;
  const int64_t got_amount = check.ConsumeIntegral<int64_t>();
  const int64_t got_limit = check.ConsumeIntegralInRange<int64_t>(0, kMax);
  if (got_op != op || has_balance != balance.has_value() || got_balance != balance.value_or(0) ||
      got_amount != amount || got_limit != limit) {
    Fail("an ApplyOperation seed does not read back as written");
  }
  return bytes;
}

void WriteOperationSeeds(CorpusWriter& out) {
  const std::string t = "fuzz_apply_operation";
  out.Write(t, "deposit-opens", Operation(Op::kDeposit, std::nullopt, 1, 0));
  out.Write(t, "deposit-to-max", Operation(Op::kDeposit, kMax - 1, 1, 0));
  out.Write(t, "deposit-overflows", Operation(Op::kDeposit, kMax - 1, 2, 0));
  out.Write(t, "withdraw-to-floor", Operation(Op::kWithdraw, 0, 100, 100));
  out.Write(t, "withdraw-below-floor", Operation(Op::kWithdraw, 0, 101, 100));
  out.Write(t, "withdraw-max-limit", Operation(Op::kWithdraw, kMin + 1, 1, kMax));
  out.Write(t, "withdraw-missing", Operation(Op::kWithdraw, std::nullopt, 1, 0));
  out.Write(t, "withdraw-zero-amount", Operation(Op::kWithdraw, 5, 0, 0));
  out.Write(t, "deposit-min-amount", Operation(Op::kDeposit, 5, kMin, 0));
  out.Write(t, "balance", Operation(Op::kBalance, -7, kMin, 3));
}

// One round-trip input, laid out as fuzz_record_roundtrip.cc reads it: an account, a journal
// entry, a request record and a pair of keys.
std::string RoundTrip(int64_t number, uint64_t sequence, const std::string& text) {
  ProviderInput input;
  input.Integral<int64_t>(number).Integral<uint64_t>(sequence);           // account
  input.Pick(1, 2).Integral<int64_t>(number).Integral<int64_t>(~number);  // journal
  input.String(text).Integral<int64_t>(number);
  input.Pick(0, 2).Integral<int64_t>(number).Pick(2, 4).Integral<int64_t>(number);  // request
  input.Integral<int64_t>(number);
  input.String(text).Integral<uint64_t>(sequence).Integral<uint64_t>(sequence - 1);  // keys
  input.String(text);
  return input.Bytes();
}

void WriteRoundTripSeeds(CorpusWriter& out) {
  const std::string t = "fuzz_record_roundtrip";
  out.Write(t, "small", RoundTrip(100, 1, "acct-1"));
  out.Write(t, "max", RoundTrip(kMax, UINT64_MAX, kLongAccountId));
  out.Write(t, "min-with-nul", RoundTrip(kMin, 0, std::string("a\0b\\c", 5)));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (fuzz/corpus)\n", argv[0]);
    return 2;
  }
  CorpusWriter out(argv[1]);
  WriteRecordSeeds(out);
  WriteRequestSeeds(out);
  WriteOperationSeeds(out);
  WriteRoundTripSeeds(out);
  std::printf("ledger-fuzz-seeds: wrote %d seeds under %s\n", out.written(), argv[1]);
  return 0;
}
