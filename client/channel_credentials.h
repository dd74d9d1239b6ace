// Defines `ClientTlsOptions` and `NewLedgerChannel`: how ledgerctl and ledger-loadtest reach
// ledgerd, in plaintext (the default) or over TLS, with a client certificate for mutual TLS.
// One function for every client binary, so that they cannot drift apart.
#ifndef LEDGER_CLIENT_CHANNEL_CREDENTIALS_H_
#define LEDGER_CLIENT_CHANNEL_CREDENTIALS_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace ledger {

struct ClientTlsOptions {
  // PEM CA bundle that verifies the server's certificate; empty: the system's roots.
  std::string ca_file;
  // PEM client certificate chain and key, for a server that asks for one (mutual TLS).
  std::string cert_file;
  std::string key_file;
  // The name the server's certificate must carry, when it is not the target's host.
  std::string server_name;

  // Any option set means TLS; none means plaintext.
  bool tls() const {
    return !ca_file.empty() || !cert_file.empty() || !key_file.empty() || !server_name.empty();
  }
};

// Reads the files named (now, so that a typo fails before any call) and builds the credentials.
// InvalidArgument names the flag (--tls_ca_file, ...) and the file.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> NewChannelCredentials(
    const ClientTlsOptions& options);

// A channel to `target` with `credentials` (from NewChannelCredentials(options), built once for
// any number of channels) and `arguments`, plus options.server_name as the name to verify.
std::shared_ptr<grpc::Channel> NewLedgerChannel(
    const std::string& target, const ClientTlsOptions& options,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    grpc::ChannelArguments arguments = {});

// Connects `channel`, the way a call that does not wait for ready would: OK once it is READY;
// UNAVAILABLE as soon as an attempt fails (refused, unreachable, a TLS handshake that failed);
// DEADLINE_EXCEEDED at `deadline`. The message names `target`. A client that sends a write only
// on a connected channel knows that a failure here sent nothing; an UNAVAILABLE after that may
// have been applied.
grpc::Status ConnectBefore(grpc::Channel& channel, const std::string& target,
                           std::chrono::system_clock::time_point deadline);

}  // namespace ledger

#endif  // LEDGER_CLIENT_CHANNEL_CREDENTIALS_H_
