#include "server/connection_drain.h"

#include <chrono>
#include <memory>

#include "base/steady_wait.h"
#include "grpcpp/alarm.h"
#include "grpcpp/version_info.h"
#include "server/grpc_deadline.h"

#if GRPC_CPP_VERSION_MAJOR == 1 && GRPC_CPP_VERSION_MINOR == 51
#define LEDGER_CONNECTION_DRAIN 1

// gRPC 1.51's core server (src/core/lib/surface/server.h), reduced to the three exported member
// functions called here. Declaring them is enough: they are non-virtual, so a call needs only the
// mangled name, which libgrpc exports.
namespace grpc_core {
class Server {
 public:
  void StopListening();
  void SendGoaways();
  bool HasOpenConnections();
};
}  // namespace grpc_core

namespace ledger {
namespace {

// In gRPC 1.51 the C handle is the core server itself: grpc_core::Server derives from
// CppImplOf<Server, grpc_server>, whose FromC is this reinterpret_cast.
grpc_core::Server* CoreServerOf(grpc::Server& server) {
  return reinterpret_cast<grpc_core::Server*>(server.c_server());
}

}  // namespace
}  // namespace ledger
#endif

namespace ledger {

bool StopListeningAndSendGoaways(grpc::Server& server, absl::Duration timeout) {
#ifdef LEDGER_CONNECTION_DRAIN
  // Both need the execution context of one of gRPC's own threads (an ExecCtx, internal to gRPC):
  // a callback alarm runs its function on gRPC's executor, inside one.
  struct Outcome {
    SteadyNotification done;
    bool sent = false;
  };
  auto outcome = std::make_shared<Outcome>();
  grpc_core::Server* core = CoreServerOf(server);
  {
    grpc::Alarm alarm;
    alarm.Set(GrpcDeadlineIn(absl::ZeroDuration()), [outcome, core](bool fired) {
      if (fired) {
        core->StopListening();
        core->SendGoaways();
        outcome->sent = true;
      }
      outcome->done.Notify();
    });
    // Past the timeout the alarm is cancelled as it goes out of scope: its function then runs
    // with fired false, unless it has already begun.
    if (!outcome->done.WaitForNotificationWithTimeout(timeout)) return false;
  }
  return outcome->sent;
#else
  (void)server;
  (void)timeout;
  return false;
#endif
}

bool HasOpenConnections(grpc::Server& server) {
#ifdef LEDGER_CONNECTION_DRAIN
  return CoreServerOf(server)->HasOpenConnections();  // Takes only the core's own lock.
#else
  (void)server;
  return false;
#endif
}

}  // namespace ledger
