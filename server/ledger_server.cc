#include "server/ledger_server.h"

#include <cassert>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"

namespace ledger {
namespace {

constexpr char kServiceName[] = "ledger.v1.Ledger";

void SetServing(grpc::Server& server, bool serving) {
  grpc::HealthCheckServiceInterface* health = server.GetHealthCheckService();
  assert(health != nullptr);
  health->SetServingStatus(serving);  // Every service, including the overall "" entry.
  health->SetServingStatus(kServiceName, serving);
}

}  // namespace

absl::StatusOr<std::unique_ptr<LedgerServer>> LedgerServer::Start(const ServerOptions& options) {
  if (options.shutdown_grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("shutdown grace must not be negative");
  }
  if (absl::Status status = ValidateTransportLimits(options.transport); !status.ok()) return status;
  RouterOptions router_options = options.router;
  router_options.shard.idempotency_ttl = options.storage.idempotency_ttl;
  router_options.shard.clock = options.storage.clock;
  const bool durable = options.storage.durability != storage::Durability::kNone;
  // A journal write must never run on a gRPC thread: with a store only shard threads apply.
  if (durable) router_options.shard.inline_execution = false;
  // Validated before the store is opened and before the metrics, which are sized by the shard
  // count.
  if (absl::Status status = Router::ValidateOptions(router_options); !status.ok()) return status;

  std::unique_ptr<storage::RocksDbStore> store;
  if (durable) {
    absl::StatusOr<std::unique_ptr<storage::RocksDbStore>> opened =
        storage::RocksDbStore::Open(options.storage);
    if (!opened.ok()) return opened.status();
    store = *std::move(opened);
    router_options.shard.store = store.get();
  }
  auto metrics = std::make_shared<LedgerMetrics>(router_options.num_shards, options.version);
  router_options.observers = metrics->observers();
  absl::StatusOr<std::unique_ptr<Router>> router = Router::Create(router_options);
  if (!router.ok()) return router.status();

  // Recovery: every account goes to the shard that owns it under this run's shard count.
  int64_t recovered = 0;
  absl::Duration recovery_time;
  if (store != nullptr) {
    const absl::Time recovery_start = absl::Now();
    absl::Status loaded =
        store->ForEachAccount([&](std::string account_id, const AccountState& state) {
          (*router)->LoadAccount(std::move(account_id), state);
          ++recovered;
        });
    if (!loaded.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot load the accounts from data directory ", options.storage.data_dir,
                       ": ", loaded.message(), ". Refusing to start without them"));
    }
    recovery_time = absl::Now() - recovery_start;
    metrics->SetRecoverySeconds(absl::ToDoubleSeconds(recovery_time));
  }

  metrics->AttachRouter(router->get());
  std::unique_ptr<LedgerServer> server(
      new LedgerServer(std::move(metrics), std::move(store), *std::move(router),
                       options.shutdown_grace, options.router.shard.policy.overdraft_limit));
  server->recovered_accounts_ = recovered;
  server->recovery_time_ = recovery_time;
  if (!options.metrics_listen_address.empty()) {
    absl::StatusOr<std::unique_ptr<MetricsEndpoint>> endpoint =
        MetricsEndpoint::Start(options.metrics_listen_address, server->metrics_);
    if (!endpoint.ok()) {
      server->Shutdown();
      return endpoint.status();
    }
    server->metrics_endpoint_ = *std::move(endpoint);
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default, which would let a second server share a port in use.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  ApplyTransportLimits(options.transport, builder);
  builder.AddListeningPort(options.listen_address, grpc::InsecureServerCredentials(),
                           &server->port_);
  builder.RegisterService(&server->service_);

  server->router_->Start();
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    server->Shutdown();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen_address,
                     ": the port is in use or the address is not one of this machine's"));
  }
  SetServing(*server->server_, true);
  return server;
}

LedgerServer::LedgerServer(std::shared_ptr<LedgerMetrics> metrics,
                           std::unique_ptr<storage::RocksDbStore> store,
                           std::unique_ptr<Router> router, absl::Duration shutdown_grace,
                           int64_t overdraft_limit)
    : metrics_(std::move(metrics)),
      store_(std::move(store)),
      router_(std::move(router)),
      shutdown_grace_(shutdown_grace),
      service_(router_.get(), metrics_.get(), overdraft_limit, store_.get()) {}

LedgerServer::~LedgerServer() { assert(shut_down_); }

void LedgerServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (server_ != nullptr) {
    SetServing(*server_, false);
    // Returns once every call has finished: shards are still running and answer the calls in
    // flight; at the deadline gRPC cancels the rest, which the shards then skip.
    server_->Shutdown(absl::ToChronoTime(absl::Now() + shutdown_grace_));
  }
  router_->Stop();
  metrics_endpoint_.reset();  // Last, so that the drain can still be watched.
}

}  // namespace ledger
