#include "server/watch_feed.h"

#include <pthread.h>

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "server/error_status.h"
#include "server/request_validation.h"
#include "server/watch_encoding.h"
#include "shard/ledger_rules.h"

namespace ledger {

// One Watch call's place in the log and its filter. The feed thread alone touches `reader`,
// `accounts` and the positions; `writing` and `gone` are the stream's signals to it.
struct WatchFeed::Watcher {
  Stream* stream = nullptr;
  std::string client;
  // Its own reader, for the positions older than the tail (null until needed).
  std::unique_ptr<storage::LogReader> reader;
  absl::flat_hash_set<std::string> accounts;  // Empty: every account.
  uint64_t next = 1;                          // The next position to read for it.
  uint64_t sent_position = 0;                 // The last position sent (or asked from).
  bool announce = false;  // start_at_end: its first message, with no events, is not sent yet.
  bool balances = false;  // with_balances: its first message, the balances, is not sent yet.
  // with_balances: the accounts in the order the request named them (each once), which the
  // balances keep.
  std::vector<std::string> balance_ids;
  SteadyTime last_message;
  SteadyTime caught_up_at;  // When sent_position last reached what was committed.
  grpc::ByteBuffer out;     // The message gRPC is sending; kept until OnWriteDone.
  std::atomic<bool> writing{false};
  std::atomic<bool> gone{false};  // Cancelled, or a write failed: the client went.
};

// The reactor of one Watch call. Refused calls finish at once; registered ones are finished by
// the feed (End), which writes to them from its thread.
class WatchFeed::Stream final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit Stream(WatchFeed* feed) : feed_(feed) {}
  void Attach(std::shared_ptr<Watcher> watcher) { watcher_ = std::move(watcher); }

  void OnWriteDone(bool ok) override {
    if (!ok) watcher_->gone.store(true, std::memory_order_release);
    watcher_->writing.store(false, std::memory_order_release);
    feed_->Wake();
  }
  void OnCancel() override {
    if (watcher_ == nullptr) return;
    watcher_->gone.store(true, std::memory_order_release);
    feed_->Wake();
  }
  void OnDone() override { delete this; }

 private:
  WatchFeed* const feed_;
  std::shared_ptr<Watcher> watcher_;
};

namespace {

grpc::Status ShuttingDown() {
  return ErrorStatus(grpc::StatusCode::UNAVAILABLE, v1::SHUTTING_DOWN,
                     "the server is stopping: watch again from the last position processed "
                     "(another replica, or this one once restarted)");
}

grpc::Status PositionNotKept(uint64_t from_position, uint64_t oldest) {
  return ErrorStatus(
      grpc::StatusCode::OUT_OF_RANGE, v1::POSITION_NOT_KEPT,
      absl::StrCat("the log after position ", from_position,
                   " is no longer kept: the oldest position kept is ", oldest,
                   " (--watch_retention keeps more); resync: watch again with_balances"),
      {{"oldest_position", absl::StrCat(oldest)}, {"from_position", absl::StrCat(from_position)}});
}

// Reads `reader` up to `last`, at most `max_bytes` of payload, and passes each position encoded
// (watch_encoding.h) to `take`. The first failure: the reader's, or a payload that does not
// decode.
absl::Status ReadEncoded(storage::LogReader& reader, uint64_t last, int64_t max_bytes,
                         const std::function<void(EncodedPosition encoded)>& take) {
  absl::Status encoded_all;
  absl::StatusOr<int> read =
      reader.Read(last, max_bytes, [&](uint64_t position, absl::string_view payload) {
        if (!encoded_all.ok()) return;
        absl::StatusOr<EncodedPosition> encoded = EncodePosition(position, payload);
        if (!encoded.ok()) {
          encoded_all = encoded.status();
          return;
        }
        take(*std::move(encoded));
      });
  return read.ok() ? encoded_all : read.status();
}

}  // namespace

grpc::Status WatchFeed::ReadFailure(const absl::Status& failure, uint64_t after) const {
  if (absl::IsOutOfRange(failure)) return PositionNotKept(after, store_->first_log_position());
  return ErrorStatus(grpc::StatusCode::UNAVAILABLE, v1::STORAGE_READ_FAILED,
                     absl::StrCat("the log cannot be read: ", failure.message()));
}

WatchFeed::WatchFeed(storage::LedgerStorage* store, const Leadership* leadership,
                     LedgerMetrics* metrics, const WatchOptions& options)
    : store_(store), leadership_(leadership), metrics_(metrics), options_(options) {
  if (store_ != nullptr) thread_ = std::thread([this] { Run(); });
}

WatchFeed::~WatchFeed() { Stop(); }

grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchFeed::Watch(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer& request_bytes) {
  auto* stream = new Stream(this);
  const auto refuse = [&](const grpc::Status& status) {
    if (metrics_ != nullptr) {
      metrics_->RecordRequest(RpcMethod::kWatch, static_cast<int>(status.error_code()));
    }
    stream->Finish(status);
    return stream;
  };
  if (leadership_ != nullptr && !leadership_->serving()) return refuse(leadership_->Refusal());
  v1::WatchRequest request;
  if (grpc::Status parsed = ParseRequest(request_bytes, request); !parsed.ok()) {
    return refuse(parsed);
  }
  if (request.account_ids_size() > options_.max_accounts) {
    return refuse(ErrorStatus(
        grpc::StatusCode::INVALID_ARGUMENT, v1::INVALID_REQUEST,
        absl::StrCat("a Watch may name at most ", options_.max_accounts,
                     " account ids (--max_watch_accounts); this one names ",
                     request.account_ids_size(), ": watch every account (none named) instead"),
        {{"field", "account_ids"}, {"limit", absl::StrCat(options_.max_accounts)}}));
  }
  auto watcher = std::make_shared<Watcher>();
  for (const std::string& account : request.account_ids()) {
    if (ValidateAccountId(account) != Outcome::kOk) {
      return refuse(ErrorStatus(
          grpc::StatusCode::INVALID_ARGUMENT, v1::INVALID_ACCOUNT_ID,
          absl::StrCat("account_ids holds an invalid account id: 1 to 128 bytes, each one of "
                       "A-Z a-z 0-9 . _ : @ -"),
          {{"field", "account_ids"}}));
    }
    if (watcher->accounts.insert(account).second && request.with_balances()) {
      watcher->balance_ids.push_back(account);
    }
  }
  if (store_ == nullptr) {
    return refuse(ErrorStatus(
        grpc::StatusCode::FAILED_PRECONDITION, v1::NOT_DURABLE,
        "this server keeps no log to watch: it runs with --durability=none (memory only)"));
  }
  if (request.with_balances() &&
      (request.account_ids().empty() || request.from_position() != 0 || request.start_at_end())) {
    return refuse(ErrorStatus(grpc::StatusCode::INVALID_ARGUMENT, v1::INVALID_REQUEST,
                              "with_balances gives the named accounts' balances as of one "
                              "position and follows them from there: name the accounts in "
                              "account_ids, with from_position 0 and no start_at_end",
                              {{"field", "with_balances"}}));
  }
  if (request.start_at_end() && request.from_position() != 0) {
    return refuse(ErrorStatus(grpc::StatusCode::INVALID_ARGUMENT, v1::INVALID_REQUEST,
                              "start_at_end starts after the newest committed position: give "
                              "from_position 0 with it, or leave it unset",
                              {{"field", "start_at_end"}}));
  }
  const uint64_t from = request.start_at_end() ? store_->log_position() : request.from_position();
  // with_balances: the position comes with the balances, from the feed's thread.
  absl::StatusOr<std::unique_ptr<storage::LogReader>> reader =
      request.with_balances() ? absl::StatusOr<std::unique_ptr<storage::LogReader>>(nullptr)
                              : store_->NewLogReader(from + 1);
  if (!reader.ok()) return refuse(ReadFailure(reader.status(), from));
  watcher->reader = *std::move(reader);
  watcher->next = from + 1;
  watcher->client = ClientKeyOf(*context, options_.client_by);
  watcher->sent_position = from;
  watcher->announce = request.start_at_end();
  watcher->balances = request.with_balances();
  watcher->last_message = watcher->caught_up_at = SteadyNow();
  watcher->stream = stream;
  {
    ::ledger::MutexLock lock(&mu_);
    if (stopping_) return refuse(ShuttingDown());
    int64_t& mine = per_client_[watcher->client];
    if (static_cast<int64_t>(watchers_.size()) >= options_.max_watchers ||
        mine >= options_.max_watchers_per_client) {
      const bool server_wide = static_cast<int64_t>(watchers_.size()) >= options_.max_watchers;
      if (mine == 0) per_client_.erase(watcher->client);
      return refuse(ErrorStatus(
          grpc::StatusCode::RESOURCE_EXHAUSTED, v1::WATCH_LIMIT,
          server_wide ? absl::StrCat("the server already serves ", options_.max_watchers,
                                     " watchers (--max_watchers)")
                      : absl::StrCat("this client already has ", options_.max_watchers_per_client,
                                     " watchers (--max_watchers_per_client)"),
          {{"limit",
            absl::StrCat(server_wide ? options_.max_watchers : options_.max_watchers_per_client)}},
          std::chrono::seconds(1)));
    }
    ++mine;
    stream->Attach(watcher);
    watchers_.push_back(std::move(watcher));
    woken_ = true;
  }
  wake_.notify_all();
  return stream;
}

void WatchFeed::Wake() {
  {
    ::ledger::MutexLock lock(&mu_);
    woken_ = true;
  }
  wake_.notify_all();
}

void WatchFeed::Run() {
  pthread_setname_np(pthread_self(), "ledger-watch");
  while (true) {
    std::vector<std::shared_ptr<Watcher>> watchers;
    {
      ::ledger::MutexLock lock(&mu_);
      if (stopping_) return;
      woken_ = false;
      watchers = watchers_;
    }
    const uint64_t committed = store_->log_position();
    ExtendTail(committed, !watchers.empty());
    const SteadyTime now = SteadyNow();
    const bool serving = leadership_ == nullptr || leadership_->serving();
    bool worked = false;
    uint64_t max_lag = 0;
    absl::Duration max_lag_time;
    for (const std::shared_ptr<Watcher>& watcher : watchers) {
      if (watcher->gone.load(std::memory_order_acquire)) {
        End(watcher, grpc::Status(grpc::StatusCode::CANCELLED, "the watcher went"));
        continue;
      }
      if (!watcher->writing.load(std::memory_order_acquire)) {
        if (!serving) {
          End(watcher, leadership_->Refusal());
          continue;
        }
        worked |= Feed(watcher, committed, now);
      }
      if (watcher->sent_position >= committed) watcher->caught_up_at = now;
      max_lag = std::max(max_lag, committed - std::min(committed, watcher->sent_position));
      max_lag_time = std::max(max_lag_time, absl::FromChrono(now - watcher->caught_up_at));
    }
    max_lag_positions_.store(max_lag, std::memory_order_relaxed);
    max_lag_seconds_.store(absl::ToDoubleSeconds(max_lag_time), std::memory_order_relaxed);
    if (worked) continue;
    ::ledger::MutexLock lock(&mu_);
    if (!woken_ && !stopping_) {
      mu_.WaitUntil(wake_, SteadyNow() + SteadyTimeout(watchers.empty() ? absl::Seconds(1)
                                                                        : options_.poll_interval));
    }
  }
}

void WatchFeed::ExtendTail(uint64_t committed, bool wanted) {
  if (!wanted) {  // No watcher: decode nothing.
    tail_.clear();
    tail_bytes_ = 0;
    tail_reader_.reset();
    return;
  }
  if (tail_reader_ == nullptr) {
    absl::StatusOr<std::unique_ptr<storage::LogReader>> reader =
        store_->NewLogReader(committed + 1);
    if (!reader.ok()) return;  // Each watcher's own reader says why.
    tail_reader_ = *std::move(reader);
  }
  const absl::Status read =
      ReadEncoded(*tail_reader_, committed, kTailReadBytes, [this](EncodedPosition encoded) {
        tail_bytes_ += encoded.bytes();
        tail_.push_back(std::move(encoded));
      });
  if (!read.ok()) {
    // The watchers read the log themselves meanwhile, and each meets the error on its own.
    tail_.clear();
    tail_bytes_ = 0;
    tail_reader_.reset();
    return;
  }
  while (tail_bytes_ > options_.tail_bytes && tail_.size() > 1) {
    tail_bytes_ -= tail_.front().bytes();
    tail_.pop_front();
  }
}

bool WatchFeed::Feed(const std::shared_ptr<Watcher>& watcher, uint64_t committed, SteadyTime now) {
  Watcher& w = *watcher;
  if (w.balances) return SendBalances(watcher, committed, now);
  std::string message;
  int events = 0;
  uint64_t last = w.next - 1;  // The last position this message covers.
  const int64_t limit = options_.message_bytes;
  if (w.next <= committed) {
    if (!tail_.empty() && w.next >= tail_.front().position && w.next <= tail_.back().position) {
      // From the tail: positions there are consecutive.
      for (size_t i = w.next - tail_.front().position;
           i < tail_.size() && static_cast<int64_t>(message.size()) < limit; ++i) {
        events += AppendEvents(tail_[i], w.accounts, message);
        last = tail_[i].position;
      }
    } else if (tail_.empty() || w.next < tail_.front().position) {
      // Older than the tail: its own reader.
      if (w.reader == nullptr || w.reader->next_position() != w.next) {
        absl::StatusOr<std::unique_ptr<storage::LogReader>> reader = store_->NewLogReader(w.next);
        if (!reader.ok()) {
          End(watcher, ReadFailure(reader.status(), w.next - 1));
          return true;
        }
        w.reader = *std::move(reader);
      }
      const uint64_t until =
          tail_.empty() ? committed : std::min(committed, tail_.front().position - 1);
      const absl::Status read =
          ReadEncoded(*w.reader, until, limit, [&](const EncodedPosition& encoded) {
            events += AppendEvents(encoded, w.accounts, message);
            last = encoded.position;
          });
      if (!read.ok()) {
        End(watcher, ReadFailure(read, w.reader->next_position() - 1));
        return true;
      }
    }
    // Else newer than the tail, which has not read that far yet: next time.
  }
  const bool read_something = last >= w.next;
  w.next = last + 1;
  if (w.announce) {
    w.announce = false;
    Send(w, message, events, last, committed, now);
    return true;
  }
  if (last <= w.sent_position) return read_something;  // Nothing new.
  if (events == 0 && now - w.last_message < absl::ToChronoNanoseconds(options_.progress_interval)) {
    return read_something;  // Read past other accounts' operations; their position goes later.
  }
  Send(w, message, events, last, committed, now);
  return true;
}

bool WatchFeed::SendBalances(const std::shared_ptr<Watcher>& watcher, uint64_t committed,
                             SteadyTime now) {
  Watcher& w = *watcher;
  w.balances = false;
  const std::vector<std::string> ids = std::move(w.balance_ids);
  // Waits for the applier's next turn (at most about a batch): on this thread, never gRPC's.
  absl::StatusOr<storage::AccountsAt> at = store_->ReadAccountsAtApplied(ids);
  if (!at.ok()) {
    End(watcher, ErrorStatus(grpc::StatusCode::UNAVAILABLE, v1::STORAGE_READ_FAILED,
                             absl::StrCat("the balances cannot be read: ", at.status().message())));
    return true;
  }
  v1::WatchResponse response;
  for (size_t i = 0; i < ids.size(); ++i) {
    v1::AccountBalance* balance = response.add_balances();
    balance->set_account_id(ids[i]);
    const std::optional<AccountState>& state = at->states[i];
    balance->set_opened(state.has_value());
    if (state.has_value()) {
      balance->set_balance(state->balance);
      balance->set_sequence(state->sequence);
    }
  }
  std::string message = response.SerializeAsString();
  w.next = at->position + 1;
  w.reader.reset();
  Send(w, message, 0, at->position, std::max(committed, at->position), now);
  return true;
}

void WatchFeed::Send(Watcher& watcher, std::string& message, int events, uint64_t position,
                     uint64_t committed, SteadyTime now) {
  AppendPositions(position, committed, message);
  events_sent_.fetch_add(static_cast<uint64_t>(events), std::memory_order_relaxed);
  messages_sent_.fetch_add(1, std::memory_order_relaxed);
  grpc::Slice slice(message.data(), message.size());
  watcher.out = grpc::ByteBuffer(&slice, 1);
  watcher.sent_position = position;
  watcher.last_message = now;
  watcher.writing.store(true, std::memory_order_release);
  watcher.stream->StartWrite(&watcher.out);
}

void WatchFeed::End(const std::shared_ptr<Watcher>& watcher, const grpc::Status& status) {
  {
    ::ledger::MutexLock lock(&mu_);
    auto it = std::find(watchers_.begin(), watchers_.end(), watcher);
    if (it == watchers_.end()) return;  // Ended already.
    watchers_.erase(it);
    auto client = per_client_.find(watcher->client);
    if (client != per_client_.end() && --client->second == 0) per_client_.erase(client);
  }
  if (metrics_ != nullptr) {
    metrics_->RecordRequest(RpcMethod::kWatch, static_cast<int>(status.error_code()));
  }
  watcher->stream->Finish(status);
}

void WatchFeed::Stop() {
  {
    ::ledger::MutexLock lock(&mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::vector<std::shared_ptr<Watcher>> left;
  {
    ::ledger::MutexLock lock(&mu_);
    left = watchers_;
  }
  for (const std::shared_ptr<Watcher>& watcher : left) End(watcher, ShuttingDown());
}

WatchStats WatchFeed::stats() const {
  WatchStats stats;
  {
    ::ledger::MutexLock lock(&mu_);
    stats.watchers = static_cast<int64_t>(watchers_.size());
  }
  stats.events_sent = events_sent_.load(std::memory_order_relaxed);
  stats.messages_sent = messages_sent_.load(std::memory_order_relaxed);
  stats.max_lag_positions = stats.watchers == 0 ? 0 : max_lag_positions_.load();
  stats.max_lag_seconds = stats.watchers == 0 ? 0 : max_lag_seconds_.load();
  return stats;
}

}  // namespace ledger
