// Defines `AppendVarint`: an unsigned integer in the base-128 varint of protobuf's wire format
// (7 bits a byte, least significant first, the high bit set on all but the last), which the log
// entry format (storage/log_entry.h) and the Watch feed's hand-made messages
// (server/watch_encoding.h) both write.
#ifndef LEDGER_BASE_VARINT_H_
#define LEDGER_BASE_VARINT_H_

#include <cstdint>
#include <string>

namespace ledger {

inline void AppendVarint(uint64_t value, std::string& out) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

}  // namespace ledger

#endif  // LEDGER_BASE_VARINT_H_
