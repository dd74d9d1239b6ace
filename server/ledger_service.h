// Defines `LedgerService`, the gRPC front end of `ledger.v1.Ledger` on the callback API: it
// validates each call, routes it to the shard that owns the account and returns at once; the
// shard's reply finishes the call.
#ifndef LEDGER_SERVER_LEDGER_SERVICE_H_
#define LEDGER_SERVER_LEDGER_SERVICE_H_

#include <cstdint>
#include <string>

#include "grpcpp/grpcpp.h"
#include "ledger/v1/ledger.grpc.pb.h"
#include "metrics/ledger_metrics.h"
#include "shard/ledger_rules.h"
#include "shard/router.h"
#include "storage/rocksdb_store.h"

namespace ledger {

// Thread-safe: gRPC calls each method from its callback threads. No method blocks: a call is
// either finished at once (bad input, shed, shutting down) or handed to a shard.
class LedgerService final : public v1::Ledger::CallbackService {
 public:
  // `router`, `metrics` and `store` are not owned and must outlive the service; `store` is null
  // when the server keeps no journal (--durability=none). `overdraft_limit` only words messages.
  LedgerService(Router* router, LedgerMetrics* metrics, int64_t overdraft_limit,
                storage::RocksDbStore* store);

  grpc::ServerUnaryReactor* Deposit(grpc::CallbackServerContext* context,
                                    const v1::DepositRequest* request,
                                    v1::DepositResponse* response) override;
  grpc::ServerUnaryReactor* Withdraw(grpc::CallbackServerContext* context,
                                     const v1::WithdrawRequest* request,
                                     v1::WithdrawResponse* response) override;
  grpc::ServerUnaryReactor* Balance(grpc::CallbackServerContext* context,
                                    const v1::BalanceRequest* request,
                                    v1::BalanceResponse* response) override;
  // Reads the journal from the store on the calling gRPC thread: it is already on disk and the
  // store is thread-safe, so History never queues behind a shard's writes.
  grpc::ServerUnaryReactor* History(grpc::CallbackServerContext* context,
                                    const v1::HistoryRequest* request,
                                    v1::HistoryResponse* response) override;

 private:
  template <typename Response>
  grpc::ServerUnaryReactor* Submit(grpc::CallbackServerContext* context, Op op,
                                   const std::string& account_id, int64_t amount,
                                   const std::string& request_id, Response* response);
  grpc::Status ReadHistory(const v1::HistoryRequest& request, v1::HistoryResponse& response);

  Router* const router_;
  LedgerMetrics* const metrics_;
  const int64_t overdraft_limit_;
  storage::RocksDbStore* const store_;
};

}  // namespace ledger

#endif  // LEDGER_SERVER_LEDGER_SERVICE_H_
