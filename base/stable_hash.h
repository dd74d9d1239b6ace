// Defines `ShardOf`, the stable mapping from an account id to a shard index.
//
// The mapping must be identical in every process, build and platform: persistence, the
// load-test client's per-shard report and any future routing tier rely on it. So it is built
// from two fixed, documented functions and never from std::hash or absl::Hash (both may be salted
// per process):
//   ShardOf(id, n) = JumpConsistentHash(Fnv1a64(id bytes), n)
// Jump consistent hash (Lamping & Veach, 2014) also moves only about 1/n of the accounts when n
// grows by one, which keeps a future re-sharding cheap.
#ifndef LEDGER_BASE_STABLE_HASH_H_
#define LEDGER_BASE_STABLE_HASH_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace ledger {

// 64-bit FNV-1a over the bytes of `data` (offset basis 14695981039346656037, prime 1099511628211).
uint64_t Fnv1a64(absl::string_view data);

// Maps `key` to a bucket in [0, num_buckets). Requires num_buckets >= 1.
int32_t JumpConsistentHash(uint64_t key, int32_t num_buckets);

// The shard that owns `account_id` among `num_shards` shards. Requires num_shards >= 1.
int32_t ShardOf(absl::string_view account_id, int32_t num_shards);

}  // namespace ledger

#endif  // LEDGER_BASE_STABLE_HASH_H_
