#include "client/tls_flags.h"

#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, tls_ca_file, "",
          "PEM CA bundle that verifies ledgerd's certificate; any --tls_* flag means TLS (without "
          "this one: the system's roots). No --tls_* flag: plaintext");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM client certificate, for a ledgerd that requires one (mutual TLS)");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file");
ABSL_FLAG(std::string, tls_server_name, "",
          "name ledgerd's certificate must carry when it is not --target's host");

namespace ledger {

const char kTlsFlagsFile[] = __FILE__;

ClientTlsOptions ClientTlsOptionsFromFlags() {
  return {absl::GetFlag(FLAGS_tls_ca_file), absl::GetFlag(FLAGS_tls_cert_file),
          absl::GetFlag(FLAGS_tls_key_file), absl::GetFlag(FLAGS_tls_server_name)};
}

}  // namespace ledger
