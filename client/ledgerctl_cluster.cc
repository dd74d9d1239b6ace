// ledgerctl cluster status: asks every member of a cluster for its view
// (ledger.v1.LedgerCluster/Status), and prints who leads, in which term, and how far behind the
// leader each member is. The members are --target's addresses and those the answers name
// (--peer_clients), so one member's address is enough.
#include <cstdint>
#include <future>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_code_names.h"
#include "client/exit_codes.h"
#include "client/json_line.h"
#include "client/ledgerctl_commands.h"
#include "client/ledgerctl_output.pb.h"
#include "ledger/v1/ledger_cluster.grpc.pb.h"

namespace ledger::ctl {
namespace {

struct Reply {
  std::string address;
  grpc::Status status;
  v1::ClusterStatusResponse response;
};

// Asks each of `addresses` at once; every call is bounded by the command's --deadline.
std::vector<Reply> AskAll(LedgerctlSession& session, const std::vector<std::string>& addresses) {
  std::vector<std::future<Reply>> pending;
  pending.reserve(addresses.size());
  for (const std::string& address : addresses) {
    std::shared_ptr<grpc::Channel> channel = session.ChannelTo(address);
    std::shared_ptr<grpc::ClientContext> context = session.NewContext();
    pending.push_back(std::async(std::launch::async, [address, channel, context] {
      Reply reply;
      reply.address = address;
      reply.status = v1::LedgerCluster::NewStub(channel)->Status(
          context.get(), v1::ClusterStatusRequest(), &reply.response);
      return reply;
    }));
  }
  std::vector<Reply> replies;
  replies.reserve(pending.size());
  for (std::future<Reply>& each : pending) replies.push_back(each.get());
  return replies;
}

std::string Role(const v1::ClusterStatusResponse& response) {
  if (!response.replica()) return "single-node";
  if (!response.leader()) return "follower";
  return response.serving() ? "leader" : "leader-loading";
}

std::string OrDash(const std::optional<uint64_t>& value) {
  return value.has_value() ? absl::StrCat(*value) : "-";
}

}  // namespace

int RunCluster(LedgerctlSession& session, const std::vector<char*>& args) {
  if (args.size() != 3 || std::string(args[2]) != "status") {
    return UsageError("cluster takes one subcommand: status");
  }
  // --target's addresses first; then, at the address the answers give, each member that did not
  // answer yet (a member that did may be known here by another address than its --peer_clients).
  std::vector<Reply> replies = AskAll(session, session.targets());
  std::set<std::string> asked(session.targets().begin(), session.targets().end());
  std::set<uint64_t> answered;
  for (const Reply& reply : replies) {
    if (reply.status.ok()) answered.insert(reply.response.node_id());
  }
  std::vector<std::string> named;
  for (const Reply& reply : replies) {
    for (const v1::ClusterMember& member : reply.response.members()) {
      if (!member.grpc_address().empty() && !answered.count(member.node_id()) &&
          asked.insert(member.grpc_address()).second) {
        named.push_back(member.grpc_address());
      }
    }
  }
  for (Reply& reply : AskAll(session, named)) replies.push_back(std::move(reply));

  // One row per member, by node id: what it answered, or the address that did not answer.
  struct Row {
    std::string address;
    const v1::ClusterStatusResponse* answer = nullptr;
    std::string error;
    std::optional<uint64_t> replicated;  // The serving leader's view of its log.
  };
  std::map<uint64_t, Row> rows;
  std::vector<const Reply*> unanswered;
  const v1::ClusterStatusResponse* leader = nullptr;
  for (const Reply& reply : replies) {
    if (!reply.status.ok()) {
      unanswered.push_back(&reply);
      continue;
    }
    if (!reply.response.replica()) {
      // A single node: nothing else to ask.
      if (session.options().json) {
        ClusterMemberLine line;
        line.set_address(reply.address);
        line.set_role(Role(reply.response));
        line.set_ledger_id(reply.response.ledger_id());
        std::cout << JsonLine(line);
      } else {
        std::cout << reply.address << " is a single node (run without --peers) of ledger "
                  << reply.response.ledger_id() << "; it serves\n";
      }
      return kExitOk;
    }
    Row& row = rows[reply.response.node_id()];
    row.address = reply.address;
    row.answer = &reply.response;
    // A leader cut off may not know yet that another leads a later term.
    if (reply.response.leader() && reply.response.serving() &&
        (leader == nullptr || reply.response.term() > leader->term())) {
      leader = &reply.response;
    }
    for (const v1::ClusterMember& member : reply.response.members()) {
      Row& named_row = rows[member.node_id()];
      if (named_row.address.empty()) named_row.address = member.grpc_address();
    }
  }
  // An address that did not answer: the member an answer named there, else a row without an
  // id (no member that answered knows it).
  std::vector<Row> strangers;
  for (const Reply* reply : unanswered) {
    Row* row = nullptr;
    for (auto& [node_id, each] : rows) {
      if (each.address == reply->address) row = &each;
    }
    if (row == nullptr) row = &strangers.emplace_back();
    row->address = reply->address;
    row->error = absl::StrCat(StatusCodeName(static_cast<int>(reply->status.error_code())), ": ",
                              reply->status.error_message());
  }
  for (auto& [node_id, row] : rows) {
    if (row.answer == nullptr && row.error.empty()) {
      row.error =
          "not asked: no member gives its gRPC address (--peer_clients); add it to --target";
    }
  }
  if (leader != nullptr) {
    for (const v1::ClusterMember& member : leader->members()) {
      if (member.replicated_position() > 0) {
        rows[member.node_id()].replicated = member.replicated_position();
      }
    }
  }

  // The ledger: the serving leader's, else the first answer's. A member of another one is named.
  std::string ledger_id;
  if (leader != nullptr) ledger_id = leader->ledger_id();
  for (const auto& [node_id, row] : rows) {
    if (ledger_id.empty() && row.answer != nullptr) ledger_id = row.answer->ledger_id();
  }
  bool degraded = leader == nullptr;
  for (auto& [node_id, row] : rows) {
    if (row.answer != nullptr && row.answer->ledger_id() != ledger_id) {
      row.error = absl::StrCat("holds ledger ", row.answer->ledger_id(), ", not ", ledger_id);
      degraded = true;
    }
  }
  if (!session.options().json) {
    if (leader != nullptr) {
      std::cout << "ledger " << ledger_id << ": node " << leader->node_id() << " leads in term "
                << leader->term() << " and serves; commit position " << leader->commit_position()
                << "\n";
    } else {
      std::cout << "ledger " << (ledger_id.empty() ? "unknown" : ledger_id)
                << ": no member serves (no leader, or it has not caught up yet)\n";
    }
    std::cout << absl::StrFormat("%-5s %-22s %-15s %-6s %-9s %-11s %s\n", "NODE", "ADDRESS", "ROLE",
                                 "TERM", "APPLIED", "REPLICATED", "BEHIND");
  }
  std::vector<std::pair<std::optional<uint64_t>, const Row*>> listed;
  listed.reserve(rows.size() + strangers.size());
  for (const auto& [node_id, row] : rows) listed.emplace_back(node_id, &row);
  for (const Row& row : strangers) listed.emplace_back(std::nullopt, &row);
  for (const auto& [node_id, row_pointer] : listed) {
    const Row& row = *row_pointer;
    std::optional<uint64_t> applied;
    if (row.answer != nullptr) applied = row.answer->applied_position();
    std::optional<uint64_t> behind;
    if (leader != nullptr) {
      const std::optional<uint64_t> reached = applied.has_value() ? applied : row.replicated;
      if (reached.has_value()) {
        behind = leader->commit_position() > *reached ? leader->commit_position() - *reached : 0;
      }
    }
    const std::string role = row.answer != nullptr ? Role(*row.answer) : "down";
    if (row.answer == nullptr) degraded = true;
    if (session.options().json) {
      ClusterMemberLine line;
      if (node_id.has_value()) line.set_node_id(*node_id);
      line.set_address(row.address);
      line.set_role(role);
      if (row.answer != nullptr) {
        line.set_ledger_id(row.answer->ledger_id());
        line.set_term(row.answer->term());
        line.set_commit_position(row.answer->commit_position());
        line.set_applied_position(row.answer->applied_position());
      }
      if (row.replicated.has_value()) line.set_replicated_position(*row.replicated);
      if (behind.has_value()) line.set_behind(*behind);
      if (!row.error.empty()) line.set_error(row.error);
      std::cout << JsonLine(line);
      continue;
    }
    std::cout << absl::StrFormat("%-5s %-22s %-15s %-6s %-9s %-11s %s%s\n", OrDash(node_id),
                                 row.address.empty() ? "-" : row.address, role,
                                 row.answer != nullptr ? absl::StrCat(row.answer->term()) : "-",
                                 OrDash(applied), OrDash(row.replicated), OrDash(behind),
                                 row.error.empty() ? "" : "   " + row.error);
  }
  return degraded ? kExitUnavailable : kExitOk;
}

}  // namespace ledger::ctl
