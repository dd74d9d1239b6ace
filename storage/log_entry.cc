#include "storage/log_entry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/varint.h"

namespace ledger::storage {
namespace {

constexpr uint8_t kVersion = 1;
constexpr uint8_t kPut = 1;
constexpr uint8_t kDelete = 2;

// Reads a varint at `at`; false when it runs past the end or over 64 bits.
bool ReadVarint(absl::string_view bytes, size_t& at, uint64_t& value) {
  value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (at >= bytes.size()) return false;
    const auto byte = static_cast<uint8_t>(bytes[at++]);
    value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

bool ReadBytes(absl::string_view bytes, size_t& at, absl::string_view& out) {
  uint64_t length = 0;
  if (!ReadVarint(bytes, at, length) || length > bytes.size() - at) return false;
  out = bytes.substr(at, static_cast<size_t>(length));
  at += static_cast<size_t>(length);
  return true;
}

}  // namespace

LogEntryBuilder::LogEntryBuilder() { Reset(); }

void LogEntryBuilder::Reset() {
  payload_.clear();
  payload_.push_back(static_cast<char>(kVersion));
  payload_.push_back('\0');  // Flags: no partition id.
}

void LogEntryBuilder::Put(LogFamily family, absl::string_view key, absl::string_view value) {
  payload_.push_back(static_cast<char>(kPut));
  payload_.push_back(static_cast<char>(family));
  AppendVarint(key.size(), payload_);
  payload_.append(key.data(), key.size());
  AppendVarint(value.size(), payload_);
  payload_.append(value.data(), value.size());
}

void LogEntryBuilder::Delete(LogFamily family, absl::string_view key) {
  payload_.push_back(static_cast<char>(kDelete));
  payload_.push_back(static_cast<char>(family));
  AppendVarint(key.size(), payload_);
  payload_.append(key.data(), key.size());
}

absl::Status ForEachLogChange(absl::string_view payload,
                              const std::function<void(const LogChange& change)>& change) {
  // A replicated log's own entries (a Raft configuration or barrier) fill their position with an
  // empty payload: no change (storage/raft_log.h).
  if (payload.empty()) return absl::OkStatus();
  if (payload.size() < 2 || static_cast<uint8_t>(payload[0]) != kVersion) {
    return absl::DataLossError(absl::StrCat("a log entry is not of version ", kVersion,
                                            " (it says ", static_cast<uint8_t>(payload[0]), ")"));
  }
  if (static_cast<uint8_t>(payload[1]) != 0) {
    return absl::DataLossError(
        absl::StrCat("a log entry has unknown flags ", static_cast<uint8_t>(payload[1])));
  }
  size_t at = 2;
  while (at < payload.size()) {
    const size_t start = at;
    if (payload.size() - at < 2) {
      return absl::DataLossError(absl::StrCat("a log entry is cut short at byte ", start));
    }
    const auto kind = static_cast<uint8_t>(payload[at++]);
    const auto family = static_cast<uint8_t>(payload[at++]);
    if ((kind != kPut && kind != kDelete) || family >= kLogFamilies) {
      return absl::DataLossError(absl::StrCat("a log entry has an unknown change (kind ", kind,
                                              ", family ", family, ") at byte ", start));
    }
    LogChange read{.family = static_cast<LogFamily>(family)};
    absl::string_view value;
    if (!ReadBytes(payload, at, read.key) || (kind == kPut && !ReadBytes(payload, at, value))) {
      return absl::DataLossError(absl::StrCat("a log entry is cut short at byte ", start));
    }
    if (kind == kPut) read.value = value;
    change(read);
  }
  return absl::OkStatus();
}

}  // namespace ledger::storage
