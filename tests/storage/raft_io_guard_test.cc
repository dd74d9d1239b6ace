// RaftIoGuard (storage/raft_io_guard.h) in front of a fake libraft I/O that records what it is
// asked and completes each request when the test says: one barrier at a time (a truncation
// waits for the snapshot being written, a snapshot for the truncation to be done), writes kept
// in libraft's order, no write after a failed one, and what is held cancelled at a close. Like
// 0.15's I/O, the fake clears a snapshot's barrier only after the snapshot's callback returns;
// the guard sends what it holds from SendHeld (the loop's check phase), never from a callback.
#include "storage/raft_io_guard.h"

#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ledger::storage {
namespace {

// The fake I/O's record: what it was asked, in order, and the requests it has not completed.
struct FakeIo {
  std::vector<std::string> calls;
  std::vector<std::pair<raft_io_append*, raft_io_append_cb>> appends;
  std::vector<std::pair<raft_io_snapshot_put*, raft_io_snapshot_put_cb>> puts;
  std::vector<bool> appends_done;
  std::vector<bool> puts_done;
  bool snapshot_barrier = false;  // Set by a snapshot put; cleared after its callback returns.
  std::vector<std::pair<raft_io_send*, raft_io_send_cb>> sends;
};
FakeIo* fake = nullptr;

int FakeAppend(raft_io*, raft_io_append* req, const raft_entry[], unsigned n,
               raft_io_append_cb cb) {
  fake->calls.push_back(absl::StrCat("append ", n));
  fake->appends.emplace_back(req, cb);
  fake->appends_done.push_back(false);
  return 0;
}
int FakeTruncate(raft_io*, raft_index index) {
  // A second barrier while the snapshot's is set: 0.15's bug that leaves a hole in the log.
  fake->calls.push_back(absl::StrCat(
      "truncate ", index, fake->snapshot_barrier ? " inside the snapshot's barrier" : ""));
  return 0;
}
int FakeSnapshotPut(raft_io*, unsigned, raft_io_snapshot_put* req, const raft_snapshot*,
                    raft_io_snapshot_put_cb cb) {
  fake->calls.push_back("snapshot");
  fake->snapshot_barrier = true;
  fake->puts.emplace_back(req, cb);
  fake->puts_done.push_back(false);
  return 0;
}
int FakeSend(raft_io*, raft_io_send* req, const raft_message* message, raft_io_send_cb cb) {
  fake->calls.push_back(absl::StrCat("send to ", message->server_id));
  fake->sends.emplace_back(req, cb);
  return 0;
}
void FakeClose(raft_io* io, raft_io_close_cb cb) {
  fake->calls.push_back("close");
  if (cb != nullptr) cb(io);
}

// libraft's side: each request's status once its callback came (unset until then).
struct Answered {
  raft_io_append req{};
  int status = -1;
};

class RaftIoGuardTest : public ::testing::Test {
 protected:
  RaftIoGuardTest() {
    fake = &fake_;
    guard_.io.append = FakeAppend;
    guard_.io.truncate = FakeTruncate;
    guard_.io.snapshot_put = FakeSnapshotPut;
    guard_.io.close = FakeClose;
    guard_.io.send = FakeSend;
    guard_.Install([this](int code) { failures_.push_back(code); });
  }
  // What the fake never completed is cancelled, as the I/O does when it closes.
  ~RaftIoGuardTest() override {
    for (size_t i = 0; i < fake_.appends.size(); ++i) {
      if (!fake_.appends_done[i]) CompleteAppend(i, RAFT_CANCELED);
    }
    for (size_t i = 0; i < fake_.puts.size(); ++i) {
      if (!fake_.puts_done[i]) CompleteSnapshot(i, RAFT_CANCELED);
    }
    for (size_t i = sends_completed_; i < fake_.sends.size(); ++i) {
      fake_.sends[i].second(fake_.sends[i].first, RAFT_CANCELED);
    }
    fake = nullptr;
  }

  // A request of libraft's, kept by the fixture: the destructor completes what the fake left.
  Answered& NewAnswered() { return answered_.emplace_back(); }

  // libraft's append of `n` entries; the request's status lands in `answered`.
  int Append(Answered* answered, unsigned n) {
    answered->req.data = answered;
    return guard_.io.append(&guard_.io, &answered->req, entries_, n,
                            [](raft_io_append* req, int status) {
                              static_cast<Answered*>(req->data)->status = status;
                            });
  }
  int SnapshotPut() {
    put_.data = &put_status_;
    return guard_.io.snapshot_put(
        &guard_.io, 0, &put_, &snapshot_,
        [](raft_io_snapshot_put* req, int status) { *static_cast<int*>(req->data) = status; });
  }
  // The fake I/O completes its `i`th write (in the order it was sent) with `status`.
  void CompleteAppend(size_t i, int status) {
    fake_.appends_done[i] = true;
    fake_.appends[i].second(fake_.appends[i].first, status);
  }
  void CompleteSnapshot(size_t i, int status) {
    fake_.puts_done[i] = true;
    fake_.puts[i].second(fake_.puts[i].first, status);
    fake_.snapshot_barrier = false;  // UvUnblock, after the callback.
  }

  // libraft's AppendEntries to `peer` with one entry of `bytes`; its status lands in `status`.
  int SendEntry(raft_id peer, size_t bytes, int* status) {
    payloads_.emplace_back(bytes, 'x');
    raft_entry& entry = sent_entries_.emplace_back();
    entry.buf.base = payloads_.back().data();
    entry.buf.len = bytes;
    raft_message message{};
    message.type = RAFT_IO_APPEND_ENTRIES;
    message.server_id = peer;
    message.append_entries.entries = &entry;
    message.append_entries.n_entries = 1;
    raft_io_send& req = send_requests_.emplace_back();
    req.data = status;
    return guard_.io.send(&guard_.io, &req, &message, [](raft_io_send* done, int result) {
      *static_cast<int*>(done->data) = result;
    });
  }
  // The fake I/O completes the sends it took, in order, through the `n`th.
  void CompleteSendsThrough(size_t n) {
    for (; sends_completed_ < n; ++sends_completed_) {
      fake_.sends[sends_completed_].second(fake_.sends[sends_completed_].first, 0);
    }
  }

  FakeIo fake_;
  std::deque<std::string> payloads_;
  std::deque<raft_entry> sent_entries_;
  std::deque<raft_io_send> send_requests_;
  size_t sends_completed_ = 0;
  std::deque<int> send_statuses_;  // The fixture's: the destructor completes sends into them.
  std::deque<Answered> answered_;  // Before the guard: outlives its callbacks.
  RaftIoGuard guard_;
  std::vector<int> failures_;
  raft_entry entries_[4]{};
  raft_io_snapshot_put put_{};
  raft_snapshot snapshot_{};
  int put_status_ = -1;
};

TEST_F(RaftIoGuardTest, WithNothingInFlightEveryRequestGoesStraightThrough) {
  Answered& a = NewAnswered();
  ASSERT_EQ(Append(&a, 2), 0);
  ASSERT_EQ(guard_.io.truncate(&guard_.io, 7), 0);
  EXPECT_EQ(fake_.calls, (std::vector<std::string>{"append 2", "truncate 7"}));
  CompleteAppend(0, 0);
  EXPECT_EQ(a.status, 0);
  EXPECT_EQ(guard_.held(), 0u);
}

TEST_F(RaftIoGuardTest, ATruncationWaitsForTheSnapshotBeingWrittenAndTheWritesAfterItWaitToo) {
  ASSERT_EQ(SnapshotPut(), 0);
  Answered& after = NewAnswered();
  ASSERT_EQ(guard_.io.truncate(&guard_.io, 5), 0);
  ASSERT_EQ(Append(&after, 3), 0);
  EXPECT_EQ(fake_.calls, (std::vector<std::string>{"snapshot"}));
  EXPECT_EQ(guard_.held(), 2u);
  CompleteSnapshot(0, 0);
  EXPECT_EQ(put_status_, 0);
  // Nothing from inside the callback: the I/O still held the snapshot's barrier then.
  EXPECT_EQ(fake_.calls, (std::vector<std::string>{"snapshot"}));
  guard_.SendHeld();  // The loop's next check phase.
  EXPECT_EQ(fake_.calls, (std::vector<std::string>{"snapshot", "truncate 5", "append 3"}));
  EXPECT_EQ(guard_.held(), 0u);
  CompleteAppend(0, 0);
  EXPECT_EQ(after.status, 0);
}

TEST_F(RaftIoGuardTest, ASnapshotWaitsUntilAWriteSentAfterTheTruncationHasCompleted) {
  Answered& before = NewAnswered();
  Answered& after = NewAnswered();
  ASSERT_EQ(Append(&before, 1), 0);
  ASSERT_EQ(guard_.io.truncate(&guard_.io, 3), 0);
  ASSERT_EQ(Append(&after, 2), 0);
  ASSERT_EQ(SnapshotPut(), 0);
  EXPECT_EQ(fake_.calls, (std::vector<std::string>{"append 1", "truncate 3", "append 2"}));
  // The write sent before the truncation proves nothing of it.
  CompleteAppend(0, 0);
  guard_.SendHeld();
  EXPECT_EQ(fake_.calls.size(), 3u);
  CompleteAppend(1, 0);
  EXPECT_EQ(fake_.calls.size(), 3u);
  guard_.SendHeld();
  EXPECT_EQ(fake_.calls.back(), "snapshot");
  EXPECT_EQ(before.status, 0);
  EXPECT_EQ(after.status, 0);
}

TEST_F(RaftIoGuardTest, AfterAFailedWriteEveryWriteIsRefusedAndTheFailureIsToldOnce) {
  Answered& failed = NewAnswered();
  Answered& later = NewAnswered();
  ASSERT_EQ(Append(&failed, 1), 0);
  ASSERT_EQ(Append(&later, 1), 0);
  CompleteAppend(0, RAFT_IOERR);
  EXPECT_EQ(failed.status, RAFT_IOERR);
  EXPECT_EQ(failures_, std::vector<int>{RAFT_IOERR});
  // One already sent completes as the I/O says.
  CompleteAppend(1, 0);
  EXPECT_EQ(later.status, 0);
  Answered& refused = NewAnswered();
  EXPECT_EQ(Append(&refused, 1), RAFT_IOERR);
  EXPECT_NE(std::string(guard_.io.errmsg).find("must restart"), std::string::npos);
  EXPECT_EQ(guard_.io.truncate(&guard_.io, 1), RAFT_IOERR);
  EXPECT_EQ(fake_.calls.size(), 2u);
  EXPECT_EQ(failures_.size(), 1u);
}

TEST_F(RaftIoGuardTest, ACancelledWriteIsNoFailure) {
  Answered& cancelled = NewAnswered();
  ASSERT_EQ(Append(&cancelled, 1), 0);
  CompleteAppend(0, RAFT_CANCELED);
  EXPECT_EQ(cancelled.status, RAFT_CANCELED);
  EXPECT_TRUE(failures_.empty());
  Answered& next = NewAnswered();
  EXPECT_EQ(Append(&next, 1), 0);
  EXPECT_EQ(fake_.calls.size(), 2u);
}

TEST_F(RaftIoGuardTest, AtACloseWhatIsHeldIsCancelledAndNeverSent) {
  ASSERT_EQ(SnapshotPut(), 0);
  Answered& held = NewAnswered();
  ASSERT_EQ(guard_.io.truncate(&guard_.io, 4), 0);
  ASSERT_EQ(Append(&held, 1), 0);
  guard_.io.close(&guard_.io, nullptr);
  EXPECT_EQ(held.status, RAFT_CANCELED);
  EXPECT_EQ(fake_.calls, (std::vector<std::string>{"snapshot", "close"}));
  EXPECT_TRUE(failures_.empty());
}

TEST_F(RaftIoGuardTest, APeerWhoseQueueIsFullIsRefusedUntilItDrainsAndOthersAreNot) {
  guard_.state->max_queued_bytes = 1000;
  guard_.state->max_queued_messages = 3;
  std::deque<int>& statuses = send_statuses_;
  // Two messages of 600 bytes to peer 2: the second goes (under 1,000 before it), the third not.
  EXPECT_EQ(SendEntry(2, 600, &statuses.emplace_back(-1)), 0);
  EXPECT_EQ(SendEntry(2, 600, &statuses.emplace_back(-1)), 0);
  EXPECT_EQ(SendEntry(2, 10, &statuses.emplace_back(-1)), RAFT_NOCONNECTION);
  EXPECT_NE(std::string(guard_.io.errmsg).find("already queued for server 2"), std::string::npos);
  // Another peer's queue is its own: three small messages go, a fourth is one too many.
  EXPECT_EQ(SendEntry(3, 10, &statuses.emplace_back(-1)), 0);
  EXPECT_EQ(SendEntry(3, 10, &statuses.emplace_back(-1)), 0);
  EXPECT_EQ(SendEntry(3, 10, &statuses.emplace_back(-1)), 0);
  EXPECT_EQ(SendEntry(3, 10, &statuses.emplace_back(-1)), RAFT_NOCONNECTION);
  EXPECT_EQ(guard_.sends_refused(), 2u);
  EXPECT_EQ(fake_.sends.size(), 5u);
  // Once the socket took peer 2's first, it has room again; callbacks reach libraft as they came.
  CompleteSendsThrough(1);
  EXPECT_EQ(statuses[0], 0);
  EXPECT_EQ(statuses[1], -1);
  EXPECT_EQ(SendEntry(2, 10, &statuses.emplace_back(-1)), 0);
  EXPECT_EQ(fake_.calls.back(), "send to 2");
  EXPECT_EQ(guard_.sends_refused(), 2u);
}

}  // namespace
}  // namespace ledger::storage
