// Defines the bytes of a LocalLog segment (storage/local_log.h has the layout), shared by the log
// that writes and recovers segments and by LocalLogReader, which follows them for a watcher.
#ifndef LEDGER_STORAGE_LOG_SEGMENT_FORMAT_H_
#define LEDGER_STORAGE_LOG_SEGMENT_FORMAT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace ledger::storage {

inline constexpr char kSegmentMagic[8] = {'L', 'D', 'G', 'R', 'L', 'O', 'G', '1'};
inline constexpr int64_t kSegmentHeaderBytes = 32;
inline constexpr int64_t kEntryHeaderBytes = 16;
inline constexpr absl::string_view kSegmentSuffix = ".seg";

// Entries start at multiples of 8 bytes.
inline int64_t Padded(int64_t bytes) { return (bytes + 7) & ~int64_t{7}; }

void PutU32(char* out, uint32_t value);
void PutU64(char* out, uint64_t value);
uint32_t GetU32(const char* in);
uint64_t GetU64(const char* in);

// The checksum of an entry: its length and position bytes, then its payload.
uint32_t EntryCrc(const char* length_bytes, const char* position_bytes, absl::string_view payload);

// An entry as read at an offset of a segment (or of a part of one read into memory).
struct ParsedEntry {
  // kZero: zeros, or no room for an entry header: the segment's entries end here. kBad: a header
  // whose entry is cut off by the end of `segment`, or whose checksum is wrong.
  enum Kind { kValid, kZero, kBad } kind = kBad;
  uint64_t position = 0;
  absl::string_view payload;
  int64_t bytes = 0;  // Header, payload and padding; kValid only.
  // The entry's payload length as its header says (kValid and kBad), so that a reader holding
  // part of a segment knows how much more to read.
  int64_t payload_length = 0;
};
ParsedEntry ParseEntryAt(absl::string_view segment, int64_t offset);

// The position a segment file's name says its first entry has; nullopt for any other name.
std::optional<uint64_t> SegmentFirstPosition(absl::string_view file_name);

}  // namespace ledger::storage

#endif  // LEDGER_STORAGE_LOG_SEGMENT_FORMAT_H_
