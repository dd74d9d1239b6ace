// Defines `TransferAuditor`, the simulator's checks of transfers (docs/architecture.md,
// "Transfers"): each reply of a transfer step is among the legal answers, each answer that says
// money moved (or came back) is backed by the store's journal when it is released, and the store
// conserves the money of the transfer accounts with what is in flight between a durable debit and
// its durable credit or refund.
//
// Why a second auditor: the Auditor (sim/auditor.h) models deposits and withdrawals exactly,
// reply by reply. Transfers run on their own accounts (no deposit or withdrawal touches them), so
// their checks need no exact model of those balances: they use the store's ground truth (the
// journal's TRANSFER_OUT/IN/REFUND entries per transfer_id, the pending records, the receipts)
// and a conservation sum that must hold exactly after every step.
#ifndef LEDGER_SIM_TRANSFER_AUDITOR_H_
#define LEDGER_SIM_TRANSFER_AUDITOR_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "shard/ledger_rules.h"
#include "shard/message.h"
#include "sim/auditor.h"
#include "sim/fault_store.h"

namespace ledger::sim {

struct TransferWorld {
  LedgerPolicy policy;
  // The accounts transfers use (opened or not) and those never opened.
  std::set<std::string> accounts;
  std::set<std::string> missing;
  // The account funded close to INT64_MAX, the only one a credit can overflow.
  std::string huge;
  // Σ of the transfer accounts' balances when the run began.
  Wide initial_total = 0;
};

// Not thread-safe.
class TransferAuditor {
 public:
  explicit TransferAuditor(TransferWorld world) : world_(std::move(world)) {}

  // A client's Transfer is about to be sent: its fields join the ones used with its id (which
  // decide when kTransferIdReused is legal).
  void Sent(const AuditedCall& call);

  // The reply the core decided for a transfer step: among the legal ones? "" when legal.
  std::string CheckDecided(const AuditedCall& call) const;

  // A transfer step's reply was released: what it says moved must be in the store already.
  std::string CheckReleased(const AuditedCall& call, const Reply& reply, const FaultStore& store);

  // The store after a step: the journal's transfer entries (each at most once, in order, a refund
  // only for a refused credit), conservation of the transfer accounts' money with what is in
  // flight, and a pending record for every amount in flight (and a debit for every pending one).
  std::string CheckStore(const FaultStore& store);

  // Nobody carries a transfer any more: none may be pending, nothing in flight.
  std::string CheckQuiescent(const FaultStore& store);

  int64_t in_flight_count() const { return static_cast<int64_t>(in_flight_.size()); }
  int64_t max_in_flight() const { return max_in_flight_; }
  int64_t refunds() const { return refunds_; }
  int64_t credits() const { return credits_; }

 private:
  using Key = std::pair<std::string, std::string>;               // (transfer_id, source)
  using Fields = std::tuple<std::string, std::string, int64_t>;  // from, to, amount

  struct Entry {
    int count = 0;
    std::string counterparty;
    int64_t amount = 0;
  };
  // Reads the journal entries the store gained since the last call.
  std::string Scan(const FaultStore& store);
  bool HasIn(const std::string& id, const std::string& from) const;
  bool Reused(const std::string& id, const Fields& fields) const;

  const TransferWorld world_;
  std::map<std::string, std::vector<Fields>> sent_;
  std::map<std::pair<std::string, Fields>, int64_t> sent_count_;
  size_t journal_scanned_ = 0;
  std::map<Key, Entry> outs_;
  std::map<std::string, Entry> ins_;  // Keyed by transfer_id: counterparty is the source.
  std::map<Key, Entry> refunds_by_key_;
  // Debited, neither credited nor refunded (from the journal), and their amount.
  std::set<Key> in_flight_;
  Wide in_flight_amount_ = 0;
  int64_t max_in_flight_ = 0;
  int64_t refunds_ = 0;
  int64_t credits_ = 0;
  uint64_t checked_version_ = ~uint64_t{0};
};

}  // namespace ledger::sim

#endif  // LEDGER_SIM_TRANSFER_AUDITOR_H_
