#include "sim/fault_store.h"

#include "shard/check.h"

namespace ledger::sim {

absl::Status FaultStore::WriteGroup(absl::Span<const BatchWrite* const> group) {
  // The core writes a batch at most once: a second write would be a double commit.
  LEDGER_CHECK(!facts_.write_called);
  facts_.write_called = true;
  facts_.write_result = plan_.write;
  *clock_ += plan_.write_delay;
  switch (plan_.write) {
    case WriteFault::kNone:
      ++successful_writes_;
      if (bug_ == StoreBugForTesting::kLoseAcknowledgedWrites && successful_writes_ % 10 == 0) {
        return absl::OkStatus();
      }
      for (const BatchWrite* batch : group) Apply(*batch);
      return absl::OkStatus();
    case WriteFault::kFail:
      return absl::UnavailableError("simulated write failure");
    case WriteFault::kFailLanded:
      for (const BatchWrite* batch : group) Apply(*batch);
      return absl::UnavailableError("simulated write failure after the data landed");
  }
  return absl::InternalError("unreachable");
}

bool FaultStore::LookupFails() {
  if (plan_.lookup_fail_percent <= 0) return false;
  const bool fails = static_cast<int>((*rng_)() % 100) < plan_.lookup_fail_percent;
  if (fails) ++facts_.lookup_failures;
  return fails;
}

absl::StatusOr<std::optional<RequestRecord>> FaultStore::FindRequest(absl::string_view account_id,
                                                                     absl::string_view request_id) {
  if (LookupFails()) return absl::UnavailableError("simulated lookup failure");
  auto found = requests_.find({std::string(account_id), std::string(request_id)});
  if (found == requests_.end()) return std::nullopt;
  return found->second;
}

absl::StatusOr<std::optional<AccountState>> FaultStore::FindAccount(absl::string_view account_id) {
  if (LookupFails()) return absl::UnavailableError("simulated lookup failure");
  auto found = accounts_.find(std::string(account_id));
  if (found == accounts_.end()) return std::nullopt;
  return found->second;
}

void FaultStore::Apply(const BatchWrite& batch) {
  for (const AccountWrite& account : batch.accounts) accounts_[account.account_id] = account.state;
  for (const JournalEntry& entry : batch.journal) journal_.push_back(entry);
  for (const RequestWrite& request : batch.requests) {
    requests_[{request.account_id, request.request_id}] = request.record;
  }
}

}  // namespace ledger::sim
