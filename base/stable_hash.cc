#include "base/stable_hash.h"

#include <cstdint>

#include "base/check.h"

namespace ledger {

uint64_t Fnv1a64(absl::string_view data) {
  constexpr uint64_t kOffsetBasis = 14695981039346656037ULL;
  constexpr uint64_t kPrime = 1099511628211ULL;
  uint64_t hash = kOffsetBasis;
  for (unsigned char byte : data) {
    hash ^= byte;
    hash *= kPrime;
  }
  return hash;
}

int32_t JumpConsistentHash(uint64_t key, int32_t num_buckets) {
  LEDGER_CHECK(num_buckets >= 1);
  // Each step jumps forward to the next bucket count at which `key` would move; the constant is
  // the 64-bit linear congruential generator from the paper.
  int64_t bucket = -1;
  int64_t next = 0;
  while (next < num_buckets) {
    bucket = next;
    key = key * 2862933555777941757ULL + 1;
    next = static_cast<int64_t>(
        static_cast<double>(bucket + 1) *
        (static_cast<double>(1LL << 31) / static_cast<double>((key >> 33) + 1)));
  }
  return static_cast<int32_t>(bucket);
}

int32_t ShardOf(absl::string_view account_id, int32_t num_shards) {
  return JumpConsistentHash(Fnv1a64(account_id), num_shards);
}

}  // namespace ledger
