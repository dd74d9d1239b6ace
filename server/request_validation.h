// Defines how the front end turns a call's raw request bytes into a validated request: the parse
// (ledgerd parses the bytes itself, see RawLedgerService) and the rules' input checks, apart from
// the gRPC server so that tests and fuzz/fuzz_request.cc drive them without one.
#ifndef LEDGER_SERVER_REQUEST_VALIDATION_H_
#define LEDGER_SERVER_REQUEST_VALIDATION_H_

#include <cstdint>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/status.h"
#include "ledger/v1/ledger.pb.h"
#include "server/status_mapping.h"
#include "shard/ledger_rules.h"

namespace ledger {

// Parses a request's bytes; INVALID_ARGUMENT, saying what may be wrong, when they are not a valid
// `Request` (truncated, of another message, or a string field that is not UTF-8). Instantiated for
// the four requests of ledger.v1.Ledger.
template <typename Request>
grpc::Status ParseRequest(const grpc::ByteBuffer& bytes, Request& request);

// Parses a Deposit, Withdraw or Balance request (`op` says which) into `request` and validates it.
// Fills `facts`' op, account_id, amount and request_id (the strings view `request`, which must
// outlive them); the caller sets overdraft_limit beforehand, for the words of a refusal. OK when
// the account id, amount and request id satisfy ValidateAccountId, ValidateAmount and
// ValidateRequestId (Balance: the account id only), and, when `require_request_id`, a Deposit or
// Withdraw carries a request id; otherwise INVALID_ARGUMENT naming what is wrong.
template <typename Request>
grpc::Status ParseAndValidate(const grpc::ByteBuffer& bytes, Op op, bool require_request_id,
                              Request& request, CallFacts& facts);

// ParseAndValidate's checks on a request already parsed.
template <typename Request>
grpc::Status ValidateAccountRequest(const Request& request, Op op, bool require_request_id,
                                    CallFacts& facts);

// Checks a parsed Transfer request and fills `facts` (op kTransfer; account_id the source,
// counterparty the destination, request_id the transfer_id; the strings view `request`). OK when,
// in this order, the transfer_id, both account ids and the amount are well formed and the
// accounts differ; otherwise INVALID_ARGUMENT naming the first that is not.
grpc::Status ValidateTransferRequest(const v1::TransferRequest& request, CallFacts& facts);

// The most operations one Apply call may carry (TigerBeetle's batches are about as large): a
// named bound on the work and memory one call brings, and on its answer's latency.
inline constexpr int kMaxApplyOperations = 8192;

// OK when an Apply request carries at most kMaxApplyOperations operations; otherwise
// INVALID_ARGUMENT for the whole call, saying so.
grpc::Status ValidateApplySize(const v1::ApplyRequest& request);

// Checks one operation of an Apply call with the rules of its own RPC (ValidateAccountRequest or
// ValidateTransferRequest) and fills `facts` (op included; the strings view `operation`). An
// operation that sets none of its fields is INVALID_ARGUMENT.
grpc::Status ValidateApplyOperation(const v1::ApplyOperation& operation, bool require_request_id,
                                    CallFacts& facts);

inline constexpr int32_t kDefaultHistoryPageSize = 50;
inline constexpr int32_t kMaxHistoryPageSize = 1000;

// Where a History call starts and how many entries it returns.
struct HistoryQuery {
  uint64_t start_sequence = 0;  // 0: the newest entry.
  int32_t page_size = kDefaultHistoryPageSize;
};

// Checks a parsed History request and fills `query`: OK when the account id is valid, page_size
// is 0 (the default) to kMaxHistoryPageSize and page_token is empty or one this server issues (a
// journal sequence number >= 1 in plain decimal); otherwise INVALID_ARGUMENT naming the field.
grpc::Status ValidateHistoryRequest(const v1::HistoryRequest& request, HistoryQuery& query);

}  // namespace ledger

#endif  // LEDGER_SERVER_REQUEST_VALIDATION_H_
