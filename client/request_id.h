// Defines `NewRequestId`: the idempotency key ledgerctl gives a deposit, withdraw or transfer
// that was given none, so that every write it sends can be retried safely.
#ifndef LEDGER_CLIENT_REQUEST_ID_H_
#define LEDGER_CLIENT_REQUEST_ID_H_

#include <string>

namespace ledger {

// "ledgerctl-" and 16 hex digits (64 random bits), new on every call: unique enough that two
// writes never share one by chance. Thread-safe.
std::string NewRequestId();

}  // namespace ledger

#endif  // LEDGER_CLIENT_REQUEST_ID_H_
