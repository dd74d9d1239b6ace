// Builds the messages of a client's single-account calls (shard/message.h).
#include "shard/message.h"

namespace ledger {

Message MakeAccountCall(Op op, absl::string_view account_id, int64_t amount,
                        absl::string_view request_id, Completion* completion) {
  Message message{.account_id = account_id, .completion = completion};
  switch (op) {
    case Op::kDeposit:
      message.kind = DepositCall{.amount = amount, .request_id = request_id};
      break;
    case Op::kWithdraw:
      message.kind = WithdrawCall{.amount = amount, .request_id = request_id};
      break;
    case Op::kBalance:
      message.kind = BalanceCall{};
      break;
    case Op::kTransfer:
    case Op::kTransferCredit:
    case Op::kTransferSettle:
      LEDGER_CHECK(false && "a transfer's message is built by the transfer coordinator");
  }
  return message;
}

}  // namespace ledger
