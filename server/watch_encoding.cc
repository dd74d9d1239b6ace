#include "server/watch_encoding.h"

#include <utility>

#include "base/varint.h"
#include "ledger/v1/ledger.pb.h"
#include "server/history_entry.h"
#include "storage/log_journal_entries.h"

namespace ledger {
namespace {

// Protobuf's wire format: a field's key is (number << 3) | wire type.
constexpr uint8_t kLengthDelimited = 2;
constexpr uint8_t kVarint = 0;

}  // namespace

int64_t EncodedPosition::bytes() const {
  int64_t total =
      static_cast<int64_t>(sizeof(*this) + events.capacity() + index.capacity() * sizeof(Event));
  for (const Event& event : index) total += static_cast<int64_t>(event.account_id.capacity());
  return total;
}

absl::StatusOr<EncodedPosition> EncodePosition(uint64_t position, absl::string_view payload) {
  EncodedPosition encoded;
  encoded.position = position;
  v1::WatchEvent event;
  std::string bytes;
  absl::Status decoded = storage::ForEachJournalEntry(payload, [&](JournalEntry entry) {
    event.Clear();
    event.set_position(position);
    event.set_account_id(entry.account_id);
    ToHistoryEntry(entry, *event.mutable_entry());
    bytes.clear();
    event.SerializeToString(&bytes);
    const auto offset = static_cast<uint32_t>(encoded.events.size());
    AppendVarint((v1::WatchResponse::kEventsFieldNumber << 3) | kLengthDelimited, encoded.events);
    AppendVarint(bytes.size(), encoded.events);
    encoded.events.append(bytes);
    encoded.index.push_back({.account_id = std::move(entry.account_id),
                             .offset = offset,
                             .length = static_cast<uint32_t>(encoded.events.size() - offset)});
  });
  if (!decoded.ok()) return decoded;
  return encoded;
}

int AppendEvents(const EncodedPosition& encoded, const absl::flat_hash_set<std::string>& accounts,
                 std::string& message) {
  if (accounts.empty()) {
    message.append(encoded.events);
    return static_cast<int>(encoded.index.size());
  }
  int appended = 0;
  for (const EncodedPosition::Event& event : encoded.index) {
    if (!accounts.contains(event.account_id)) continue;
    message.append(encoded.events, event.offset, event.length);
    ++appended;
  }
  return appended;
}

void AppendPositions(uint64_t position, uint64_t committed, std::string& message) {
  AppendVarint((v1::WatchResponse::kPositionFieldNumber << 3) | kVarint, message);
  AppendVarint(position, message);
  AppendVarint((v1::WatchResponse::kCommittedPositionFieldNumber << 3) | kVarint, message);
  AppendVarint(committed, message);
}

}  // namespace ledger
