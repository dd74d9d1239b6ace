// Defines the four --tls_* flags that ledgerctl and ledger-loadtest share, and
// `ClientTlsOptionsFromFlags`, so that both clients spell, explain and read them the same way.
#ifndef LEDGER_CLIENT_TLS_FLAGS_H_
#define LEDGER_CLIENT_TLS_FLAGS_H_

#include "client/channel_credentials.h"

namespace ledger {

// __FILE__ of the file that defines the flags, for cli::ProgramSpec::shared_flag_files (so that
// each client's --help lists them with its own flags).
extern const char kTlsFlagsFile[];

// --tls_ca_file, --tls_cert_file, --tls_key_file and --tls_server_name, as options. Main only.
ClientTlsOptions ClientTlsOptionsFromFlags();

}  // namespace ledger

#endif  // LEDGER_CLIENT_TLS_FLAGS_H_
