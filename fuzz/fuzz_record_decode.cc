// Fuzzes the storage record decoders (storage/record_codec.h) with arbitrary bytes, as a damaged
// or foreign RocksDB value would present them: each decoder returns a value or DataLoss, never
// crashes; a decoded value re-encodes to bytes that decode to the same value and are the
// encoder's fixed point; a key JournalKeySequence accepts is exactly JournalKey of its parts.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_check.h"
#include "google/protobuf/stubs/logging.h"
#include "storage/record_codec.h"

namespace ledger::storage {
namespace {

// Decode(bytes) is a value or DataLoss; Encode of a value is canonical: it decodes to the same
// value and re-encodes to itself.
template <typename Value>
void CheckDecoder(absl::string_view bytes, absl::StatusOr<Value> (*decode)(absl::string_view),
                  std::string (*encode)(const Value&)) {
  absl::StatusOr<Value> decoded = decode(bytes);
  if (!decoded.ok()) {
    FUZZ_CHECK(decoded.status().code() == absl::StatusCode::kDataLoss);
    FUZZ_CHECK(!decoded.status().message().empty());
    return;
  }
  const std::string encoded = encode(*decoded);
  absl::StatusOr<Value> again = decode(encoded);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(*again == *decoded);
  FUZZ_CHECK(encode(*again) == encoded);
}

void CheckJournalKey(absl::string_view key) {
  std::optional<uint64_t> sequence = JournalKeySequence(key);
  if (!sequence.has_value()) {
    // Only a key shorter than a separator and 8 bytes, or with no separator before them.
    FUZZ_CHECK(key.size() < 9 || key[key.size() - 9] != '\0');
    return;
  }
  const absl::string_view account_id = key.substr(0, key.size() - 9);
  FUZZ_CHECK(JournalKey(account_id, *sequence) == key);
  FUZZ_CHECK(absl::string_view(key).substr(0, key.size() - 8) == JournalPrefix(account_id));
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
  namespace storage = ledger::storage;
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  storage::CheckDecoder<ledger::AccountState>(bytes, &storage::DecodeAccount,
                                              &storage::EncodeAccount);
  storage::CheckDecoder<ledger::JournalEntry>(bytes, &storage::DecodeJournal,
                                              &storage::EncodeJournal);
  storage::CheckDecoder<ledger::RequestRecord>(bytes, &storage::DecodeRequest,
                                               &storage::EncodeRequest);
  storage::CheckDecoder<ledger::TransferRecord>(bytes, &storage::DecodeTransfer,
                                                &storage::EncodeTransfer);
  storage::CheckDecoder<ledger::CreditReceipt>(bytes, &storage::DecodeCredit,
                                               &storage::EncodeCredit);
  storage::CheckJournalKey(bytes);
  return 0;
}
