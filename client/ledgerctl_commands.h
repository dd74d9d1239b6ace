// Declares ledgerctl's commands, one function each, run by client/ledgerctl.cc once the command
// line is checked: `args` is the positional words ("ledgerctl", the command, its arguments).
// Each prints its result (or error) and returns ledgerctl's exit code (client/exit_codes.h).
//   client/ledgerctl_writes.cc         deposit, withdraw, transfer
//   client/ledgerctl_reads.cc          balance, history, get-transfer, health
//   client/ledgerctl_apply_command.cc  apply
//   client/ledgerctl_backup.cc         backup
//   client/ledgerctl_cluster.cc        cluster status
//   client/ledgerctl_watch.cc          watch
#ifndef LEDGER_CLIENT_LEDGERCTL_COMMANDS_H_
#define LEDGER_CLIENT_LEDGERCTL_COMMANDS_H_

#include <vector>

#include "client/ledgerctl_session.h"

namespace ledger::ctl {

int RunDeposit(LedgerctlSession& session, const std::vector<char*>& args);
int RunWithdraw(LedgerctlSession& session, const std::vector<char*>& args);
int RunTransfer(LedgerctlSession& session, const std::vector<char*>& args);
int RunBalance(LedgerctlSession& session, const std::vector<char*>& args);
int RunHistory(LedgerctlSession& session, const std::vector<char*>& args);
int RunGetTransfer(LedgerctlSession& session, const std::vector<char*>& args);
int RunHealth(LedgerctlSession& session, const std::vector<char*>& args);
int RunApply(LedgerctlSession& session, const std::vector<char*>& args);
int RunBackup(LedgerctlSession& session, const std::vector<char*>& args);
int RunCluster(LedgerctlSession& session, const std::vector<char*>& args);
int RunWatch(LedgerctlSession& session, const std::vector<char*>& args);

}  // namespace ledger::ctl

#endif  // LEDGER_CLIENT_LEDGERCTL_COMMANDS_H_
