#include "storage/log_segment_format.h"

#include <zlib.h>

#include <algorithm>

#include "absl/strings/numbers.h"

namespace ledger::storage {

void PutU32(char* out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}
void PutU64(char* out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}
uint32_t GetU32(const char* in) {
  uint32_t value = 0;
  for (int i = 3; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(in[i]);
  return value;
}
uint64_t GetU64(const char* in) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(in[i]);
  return value;
}

uint32_t EntryCrc(const char* length_bytes, const char* position_bytes, absl::string_view payload) {
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(length_bytes), 4);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(position_bytes), 8);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(payload.data()), payload.size());
  return static_cast<uint32_t>(crc);
}

ParsedEntry ParseEntryAt(absl::string_view segment, int64_t offset) {
  ParsedEntry entry;
  const int64_t size = static_cast<int64_t>(segment.size());
  if (offset + kEntryHeaderBytes > size) {
    entry.kind = ParsedEntry::kZero;  // No room for another entry: the segment ends here.
    return entry;
  }
  const char* header = segment.data() + offset;
  if (std::all_of(header, header + kEntryHeaderBytes, [](char c) { return c == 0; })) {
    entry.kind = ParsedEntry::kZero;
    return entry;
  }
  const int64_t length = GetU32(header);
  entry.position = GetU64(header + 8);
  entry.payload_length = length;
  if (length > size - offset - kEntryHeaderBytes) return entry;
  entry.payload =
      segment.substr(static_cast<size_t>(offset + kEntryHeaderBytes), static_cast<size_t>(length));
  if (EntryCrc(header, header + 8, entry.payload) != GetU32(header + 4)) return entry;
  entry.kind = ParsedEntry::kValid;
  entry.bytes = Padded(kEntryHeaderBytes + length);
  return entry;
}

std::optional<uint64_t> SegmentFirstPosition(absl::string_view file_name) {
  if (file_name.size() != 20 + kSegmentSuffix.size() || file_name.substr(20) != kSegmentSuffix) {
    return std::nullopt;
  }
  uint64_t first = 0;
  if (!absl::SimpleAtoi(file_name.substr(0, 20), &first)) return std::nullopt;
  return first;
}

}  // namespace ledger::storage
