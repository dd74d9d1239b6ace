#include "server/client_identity.h"

#include <memory>

#include "absl/strings/str_cat.h"

namespace ledger {

std::optional<FairShareBy> ParseFairShareBy(std::string_view text) {
  if (text == "address") return FairShareBy::kAddress;
  if (text == "connection") return FairShareBy::kConnection;
  return std::nullopt;
}

std::string_view PeerAddress(std::string_view peer) {
  const size_t colon = peer.rfind(':');
  const size_t scheme_end = peer.find(':');
  // "ipv4:1.2.3.4:5" has its port after the last colon; "unix:/path" has no port.
  if (colon == std::string_view::npos || colon == scheme_end) return peer;
  const std::string_view port = peer.substr(colon + 1);
  if (port.empty() || port.find_first_not_of("0123456789") != std::string_view::npos) return peer;
  return peer.substr(0, colon);
}

std::string ClientKeyOf(const grpc::CallbackServerContext& context, FairShareBy by) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    std::string key = "tls:";
    bool first = true;
    for (const grpc::string_ref& name : auth->GetPeerIdentity()) {
      if (!first) key += ',';
      key.append(name.data(), name.size());
      first = false;
    }
    return key;
  }
  const std::string peer = context.peer();
  if (by == FairShareBy::kConnection) return absl::StrCat("connection:", peer);
  const std::string_view address = PeerAddress(peer);
  return std::string("address:").append(address.data(), address.size());
}

}  // namespace ledger
