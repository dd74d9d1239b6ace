// RaftLog (storage/raft_log.h): three real libraft replicas in this process, on loopback ports,
// each with its own directories. What a commit means (every replica mirrors the entry at the
// same position, in order, once), what a follower and a cut-off leader answer, and what
// restarts keep.
#include "storage/raft_log.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/annotated_mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/local_log.h"
#include "tests/scratch_dir.h"
#include "tests/unused_port.h"
#include "tests/wait_until.h"

namespace ledger::storage {
namespace {

using ::ledger::testing_util::ScratchDir;
using ::ledger::testing_util::UnusedPort;
using ::ledger::testing_util::WaitUntil;
using ::testing::HasSubstr;

// What one replica's on_committed saw, by position.
class Committed {
 public:
  void Add(uint64_t position, absl::string_view payload) {
    MutexLock lock(&mu_);
    ++calls_[position];
    payloads_[position] = std::string(payload);
  }
  std::map<uint64_t, std::string> payloads() const {
    MutexLock lock(&mu_);
    return payloads_;
  }
  int calls(uint64_t position) const {
    MutexLock lock(&mu_);
    auto it = calls_.find(position);
    return it == calls_.end() ? 0 : it->second;
  }

 private:
  mutable Mutex mu_;  // std::mutex-based, so that ThreadSanitizer sees it (base/annotated_mutex.h).
  std::map<uint64_t, std::string> payloads_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, int> calls_ ABSL_GUARDED_BY(mu_);
};

class RaftLogTest : public ::testing::Test {
 protected:
  RaftLogTest() {
    for (int i = 0; i < 3; ++i) {
      peers_.push_back(
          RaftPeer{static_cast<uint64_t>(i) + 1, absl::StrCat("127.0.0.1:", UnusedPort())});
    }
  }
  ~RaftLogTest() override {
    for (auto& replica : replicas_) replica.reset();
  }

  RaftLogOptions OptionsFor(int i) {
    RaftLogOptions options;
    options.node_id = static_cast<uint64_t>(i) + 1;
    options.peers = peers_;
    options.raft_dir = dir_.Sub(absl::StrCat("raft", i + 1));
    options.log_dir = dir_.Sub(absl::StrCat("log", i + 1));
    options.log_segment_bytes = 1 << 20;
    options.libraft_segment_bytes = libraft_segment_bytes_;
    options.snapshot_threshold = snapshot_threshold_;
    options.snapshot_trailing = snapshot_trailing_;
    options.snapshot_bytes = snapshot_bytes_;
    // Short timeouts keep the elections of these tests quick; the production defaults are
    // 300 and 50 ms.
    options.election_timeout = election_timeout_;
    options.heartbeat_interval = absl::Milliseconds(30);
    options.on_committed = [this, i](uint64_t position, absl::string_view payload) {
      committed_[i].Add(position, payload);
    };
    options.mirror_fault = [this, i](absl::string_view step) {
      if (step == "sync") mirror_syncs_[i].fetch_add(1);
      if (step == "write" && mirror_fails_[i].load()) {
        return absl::InternalError("injected: the mirror's write failed (EIO)");
      }
      return absl::OkStatus();
    };
    return options;
  }

  void Start(int i) {
    absl::StatusOr<std::unique_ptr<RaftLog>> log = RaftLog::Open(OptionsFor(i));
    ASSERT_TRUE(log.ok()) << log.status();
    replicas_[i] = std::move(*log);
  }
  void StartAll() {
    for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(Start(i));
  }

  // The index of the running replica that leads, once exactly one running replica says it does.
  int WaitForLeader() {
    int leader = -1;
    EXPECT_TRUE(WaitUntil(
        [&] {
          int leaders = 0;
          for (int i = 0; i < 3; ++i) {
            if (replicas_[i] != nullptr && replicas_[i]->Status().leader) {
              leader = i;
              ++leaders;
            }
          }
          return leaders == 1;
        },
        "one replica leads"));
    return leader;
  }

  // Appends on the leader, retrying while a new one is being elected. A leader that lost its
  // lead with an entry in flight (a slow machine misses an election timeout) poisons its log
  // until Repair, as ledgerd's store does after such a failure; without the Repair the test
  // asked the poisoned log again and again, and "the pair did not recover" (replication.md 9.2,
  // item 4, seen again under ThreadSanitizer in CI).
  uint64_t AppendOnLeader(absl::string_view payload) {
    absl::StatusOr<uint64_t> position = absl::UnknownError("never tried");
    EXPECT_TRUE(WaitUntil(
        [&] {
          const int leader = WaitForLeader();
          if (leader < 0) return false;
          position = replicas_[leader]->Append(payload);
          if (!position.ok() && !replicas_[leader]->poisoned().ok()) {
            EXPECT_TRUE(replicas_[leader]->Repair().ok());
          }
          return position.ok();
        },
        absl::StrCat("the leader commits '", payload, "'")))
        << "last answer: " << position.status();
    return position.value_or(0);
  }

  void WaitForMirrored(int i, uint64_t position) {
    ASSERT_TRUE(WaitUntil([&] { return replicas_[i]->last_position() >= position; },
                          absl::StrCat("replica ", i + 1, " mirrors position ", position)));
  }

  // Appends `count` entries named `prefix` N, waits until every replica mirrors them, restarts
  // all three and commits `after`, waiting until every replica mirrors that too.
  struct Restart {
    std::map<uint64_t, std::string> before;  // Replica 1's mirror before the restart.
    uint64_t last = 0;                       // The last position appended before it.
    uint64_t next = 0;                       // The position of `after`.
  };
  Restart AppendThenRestartAll(int count, absl::string_view prefix, absl::string_view after) {
    Restart restart;
    for (int n = 0; n < count; ++n) restart.last = AppendOnLeader(absl::StrCat(prefix, n));
    for (int i = 0; i < 3; ++i) WaitForMirrored(i, restart.last);
    if (HasFatalFailure()) return restart;
    restart.before = MirrorOf(0);
    for (auto& replica : replicas_) replica.reset();
    StartAll();
    restart.next = AppendOnLeader(after);
    for (int i = 0; i < 3; ++i) WaitForMirrored(i, restart.next);
    return restart;
  }

  std::map<uint64_t, std::string> MirrorOf(int i) {
    std::map<uint64_t, std::string> entries;
    EXPECT_TRUE(replicas_[i]
                    ->ReadFrom(replicas_[i]->first_position(),
                               [&](uint64_t position, absl::string_view payload) {
                                 entries[position] = std::string(payload);
                                 return absl::OkStatus();
                               })
                    .ok());
    return entries;
  }

  ScratchDir dir_;
  std::vector<RaftPeer> peers_;
  std::array<Committed, 3> committed_;
  std::array<std::atomic<bool>, 3> mirror_fails_{};
  std::array<std::atomic<int>, 3> mirror_syncs_{};
  unsigned snapshot_threshold_ = 1024;
  unsigned snapshot_trailing_ = 128;
  int64_t snapshot_bytes_ = int64_t{64} << 20;
  absl::Duration election_timeout_ = absl::Milliseconds(150);
  int64_t libraft_segment_bytes_ = int64_t{8} << 20;
  std::array<std::unique_ptr<RaftLog>, 3> replicas_;
};

TEST(RaftPeersTest, ParsesIdsAndAddresses) {
  absl::StatusOr<std::vector<RaftPeer>> peers =
      ParseRaftPeers("1=10.0.0.1:7001,2=10.0.0.2:7002,3=host-c:7003");
  ASSERT_TRUE(peers.ok()) << peers.status();
  ASSERT_EQ(peers->size(), 3u);
  EXPECT_EQ((*peers)[2].id, 3u);
  EXPECT_EQ((*peers)[2].address, "host-c:7003");
}

TEST(RaftPeersTest, RefusesMalformedZeroAndRepeatedIds) {
  EXPECT_THAT(ParseRaftPeers("1=10.0.0.1:7001,0=10.0.0.2:7002").status().message(),
              HasSubstr("'0=10.0.0.2:7002'"));
  EXPECT_THAT(ParseRaftPeers("1=10.0.0.1").status().message(), HasSubstr("ID=HOST:PORT"));
  EXPECT_THAT(ParseRaftPeers("x=10.0.0.1:1").status().message(), HasSubstr("ID=HOST:PORT"));
  EXPECT_THAT(ParseRaftPeers("2=a:1,2=b:2").status().message(), HasSubstr("appears twice"));
  EXPECT_EQ(ParseRaftPeers("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RaftLogTest, RefusesANodeThatIsNotAPeer) {
  RaftLogOptions options = OptionsFor(0);
  options.node_id = 4;
  absl::StatusOr<std::unique_ptr<RaftLog>> log = RaftLog::Open(options);
  EXPECT_EQ(log.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(log.status().message(), HasSubstr("node 4 is not among the peers"));
}

TEST_F(RaftLogTest, EveryReplicaMirrorsEveryCommittedEntryAtTheSamePositionOnce) {
  StartAll();
  std::vector<uint64_t> positions;
  for (int n = 0; n < 20; ++n) positions.push_back(AppendOnLeader(absl::StrCat("entry ", n)));
  for (size_t n = 1; n < positions.size(); ++n) EXPECT_GT(positions[n], positions[n - 1]);

  for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(WaitForMirrored(i, positions.back()));
  const std::map<uint64_t, std::string> first = MirrorOf(0);
  // Positions are Raft indexes, from 1 without a gap; Raft's own entries are empty payloads.
  ASSERT_EQ(first.begin()->first, 1u);
  EXPECT_EQ(first.rbegin()->first, first.size());
  for (int n = 0; n < 20; ++n) EXPECT_EQ(first.at(positions[n]), absl::StrCat("entry ", n));
  for (int i = 1; i < 3; ++i) EXPECT_EQ(MirrorOf(i), first) << "replica " << i + 1;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(committed_[i].payloads(), first) << "replica " << i + 1;
    for (uint64_t position : positions) EXPECT_EQ(committed_[i].calls(position), 1);
  }
}

// libraft's segments take RaftLogOptions::libraft_segment_bytes (not its 8 MiB): the ones it
// prepares ahead are that size, and 2.5 MiB of entries fill and close at least two. (A segment
// can be larger: libraft grows the open one for a batch of entries bigger than a segment, which a
// follower that fell behind receives; seen once in CI under ThreadSanitizer, 1,380,352 bytes.)
TEST_F(RaftLogTest, LibraftsSegmentsTakeTheConfiguredSize) {
  constexpr uint64_t kSegment = uint64_t{1} << 20;
  libraft_segment_bytes_ = static_cast<int64_t>(kSegment);
  StartAll();
  const std::string payload(64 << 10, 'x');
  uint64_t last = 0;
  for (int n = 0; n < 40; ++n) last = AppendOnLeader(payload);  // 2.5 MiB of entries.
  for (int i = 0; i < 3; ++i) WaitForMirrored(i, last);
  for (int i = 0; i < 3; ++i) {
    int prepared = 0;  // Open segments of exactly the configured size.
    int closed = 0;
    for (const auto& file : std::filesystem::directory_iterator(OptionsFor(i).raft_dir)) {
      const std::string name = file.path().filename().string();
      if (absl::StartsWith(name, "open-")) {
        EXPECT_GE(file.file_size(), kSegment) << name;
        if (file.file_size() == kSegment) ++prepared;
      } else if (name.find('-') != std::string::npos) {  // first-last: a closed segment.
        ++closed;
      }
    }
    EXPECT_GE(prepared, 1) << "replica " << i + 1;
    EXPECT_GE(closed, 2) << "replica " << i + 1;  // With 8 MiB segments: none.
  }
}

TEST_F(RaftLogTest, AFollowerRefusesToProposeAndNamesTheLeader) {
  StartAll();
  AppendOnLeader("first");
  const int leader = WaitForLeader();
  const int follower = (leader + 1) % 3;
  const uint64_t before = replicas_[follower]->last_position();
  absl::StatusOr<uint64_t> refused = replicas_[follower]->Append("not here");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  // The leader it names, with its address (normally `leader`; an election in between may have
  // moved it, never to the follower itself).
  int named = 0;
  for (const RaftPeer& peer : peers_) {
    if (absl::StrContains(refused.status().message(),
                          absl::StrCat("the leader is node ", peer.id, " at ", peer.address))) {
      EXPECT_NE(peer.id, static_cast<uint64_t>(follower) + 1);
      ++named;
    }
  }
  EXPECT_EQ(named, 1) << refused.status();
  // Nothing was proposed, and the follower may go on asking.
  EXPECT_TRUE(replicas_[follower]->poisoned().ok());
  const uint64_t next = AppendOnLeader("second");
  ASSERT_NO_FATAL_FAILURE(WaitForMirrored(follower, next));
  for (const auto& [position, payload] : MirrorOf(follower)) {
    if (position > before) {
      EXPECT_NE(payload, "not here");
    }
  }
}

TEST_F(RaftLogTest, ABarrierOnTheLeaderReturnsOnceEveryEntryBeforeItIsCommittedHere) {
  StartAll();
  const uint64_t last_entry = AppendOnLeader("before the barrier");
  const int leader = WaitForLeader();
  absl::StatusOr<uint64_t> barrier = replicas_[leader]->Barrier();
  ASSERT_TRUE(barrier.ok()) << barrier.status();
  EXPECT_GT(*barrier, last_entry);
  // On the leader, at once: the barrier's own position is mirrored (empty) and on_committed has
  // seen everything up to it, without waiting for another entry.
  EXPECT_EQ(replicas_[leader]->last_position(), *barrier);
  const std::map<uint64_t, std::string> seen = committed_[leader].payloads();
  EXPECT_EQ(seen.rbegin()->first, *barrier);
  EXPECT_EQ(seen.at(*barrier), "");
  EXPECT_EQ(seen.at(last_entry), "before the barrier");
  // The next entry follows the barrier, and a follower fills the barrier's position as it
  // mirrors that entry.
  const uint64_t after = AppendOnLeader("after the barrier");
  EXPECT_EQ(after, *barrier + 1);
  const int follower = (leader + 1) % 3;
  ASSERT_NO_FATAL_FAILURE(WaitForMirrored(follower, after));
  EXPECT_EQ(MirrorOf(follower).at(*barrier), "");
  // A follower proposes no barrier, and a barrier never poisons the log.
  absl::StatusOr<uint64_t> refused = replicas_[follower]->Barrier();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(replicas_[follower]->poisoned().ok());
}

// libraft 0.15 leaves Nagle's algorithm on (storage/raft_nodelay.h): every connection between
// the replicas must have it off, or pipelined entries wait up to 40 ms for delayed ACKs.
TEST_F(RaftLogTest, EveryConnectionBetweenReplicasHasNagleOff) {
  StartAll();
  for (int n = 0; n < 3; ++n) AppendOnLeader(absl::StrCat("entry ", n));
  std::set<int> ports;
  for (const RaftPeer& peer : peers_) {
    ports.insert(std::stoi(peer.address.substr(peer.address.rfind(':') + 1)));
  }
  int connections = 0;
  for (int fd = 0; fd < 4096; ++fd) {
    sockaddr_in local{};
    sockaddr_in remote{};
    socklen_t local_length = sizeof local;
    socklen_t remote_length = sizeof remote;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_length) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &remote_length) != 0 ||
        local.sin_family != AF_INET) {
      continue;  // Not a connected IPv4 socket.
    }
    if (ports.count(ntohs(local.sin_port)) == 0 && ports.count(ntohs(remote.sin_port)) == 0) {
      continue;  // Not between the replicas.
    }
    int nodelay = 0;
    socklen_t length = sizeof nodelay;
    ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, &length), 0);
    EXPECT_EQ(nodelay, 1) << "fd " << fd << ", ports " << ntohs(local.sin_port) << " -> "
                          << ntohs(remote.sin_port);
    ++connections;
  }
  // At least the leader's connection to each follower, both ends of it in this process (the
  // others are made as replicas first need them: a follower's to the leader, a candidate's).
  EXPECT_GE(connections, 4);
}

TEST_F(RaftLogTest, AFollowerWhoseMirrorCannotBeWrittenCatchesUpOnceItCan) {
  StartAll();
  AppendOnLeader("before");
  const int leader = WaitForLeader();
  const int failing = (leader + 1) % 3;
  const int healthy = (leader + 2) % 3;
  const uint64_t held_back = replicas_[failing]->last_position();
  mirror_fails_[failing] = true;

  // The leader and the healthy follower are a majority: the entries commit without it.
  uint64_t last = 0;
  for (int n = 0; n < 5; ++n) last = AppendOnLeader(absl::StrCat("while failing ", n));
  ASSERT_NO_FATAL_FAILURE(WaitForMirrored(healthy, last));
  EXPECT_LT(replicas_[failing]->last_position(), last);
  EXPECT_LE(replicas_[failing]->last_position(), held_back);
  EXPECT_EQ(committed_[failing].calls(last), 0);

  mirror_fails_[failing] = false;
  ASSERT_NO_FATAL_FAILURE(WaitForMirrored(failing, last));
  EXPECT_EQ(MirrorOf(failing), MirrorOf(healthy));
  EXPECT_EQ(committed_[failing].payloads(), committed_[healthy].payloads());
  for (const auto& [position, payload] : MirrorOf(failing)) {
    EXPECT_EQ(committed_[failing].calls(position), 1) << "position " << position;
  }
}

TEST_F(RaftLogTest, TheLeadersAppendWaitsUntilItsOwnMirrorHoldsTheEntry) {
  StartAll();
  AppendOnLeader("before");
  const int leader = WaitForLeader();
  mirror_fails_[leader] = true;
  std::atomic<bool> returned{false};
  absl::StatusOr<uint64_t> position = absl::UnknownError("not returned");
  std::thread append([&] {
    position = replicas_[leader]->Append("held");
    returned = true;
  });
  // Committed on a majority (the followers mirror it), but not yet in the leader's mirror.
  const int follower = (leader + 1) % 3;
  ASSERT_TRUE(WaitUntil(
      [&] {
        const std::map<uint64_t, std::string> mirror = MirrorOf(follower);
        return !mirror.empty() && mirror.rbegin()->second == "held";
      },
      "a follower mirrors the entry"));
  EXPECT_FALSE(returned.load());

  mirror_fails_[leader] = false;
  append.join();
  ASSERT_TRUE(position.ok()) << position.status();
  EXPECT_EQ(MirrorOf(leader).at(*position), "held");
  EXPECT_EQ(MirrorOf(follower).at(*position), "held");
  EXPECT_EQ(committed_[leader].calls(*position), 1);
}

TEST_F(RaftLogTest, ANewLeaderTakesOverAndTheOldOneCatchesUpWhenItReturns) {
  StartAll();
  const uint64_t before = AppendOnLeader("before");
  const int old_leader = WaitForLeader();
  replicas_[old_leader].reset();  // Stopped: the others stop hearing from it.

  const uint64_t after = AppendOnLeader("after");
  EXPECT_GT(after, before);
  EXPECT_NE(WaitForLeader(), old_leader);

  const int calls_before = committed_[old_leader].calls(before);
  ASSERT_NO_FATAL_FAILURE(Start(old_leader));
  ASSERT_NO_FATAL_FAILURE(WaitForMirrored(old_leader, after));
  const int other = (old_leader + 1) % 3;
  EXPECT_EQ(MirrorOf(old_leader), MirrorOf(other));
  EXPECT_EQ(MirrorOf(old_leader).at(after), "after");
  // What it had mirrored before it stopped is not handed out again.
  EXPECT_EQ(committed_[old_leader].calls(before), calls_before);
  EXPECT_EQ(committed_[old_leader].calls(after), 1);
}

TEST_F(RaftLogTest, ARestartOfEveryReplicaKeepsTheLogAndGoesOnFromIt) {
  StartAll();
  Restart restart;
  ASSERT_NO_FATAL_FAILURE(restart = AppendThenRestartAll(5, "kept ", "after the restart"));
  const auto& [before, last, next] = restart;
  EXPECT_GT(next, last);
  for (int i = 0; i < 3; ++i) {
    std::map<uint64_t, std::string> mirror = MirrorOf(i);
    EXPECT_EQ(mirror.at(next), "after the restart");
    mirror.erase(mirror.upper_bound(last), mirror.end());
    EXPECT_EQ(mirror, before) << "replica " << i + 1;
    EXPECT_EQ(committed_[i].calls(last), 1) << "replica " << i + 1;
  }
}

TEST_F(RaftLogTest, SnapshotsEveryFewEntriesKeepEveryReplicaWhole) {
  snapshot_threshold_ = 4;
  StartAll();
  // Each restores its own last snapshot (covered by its mirror) and replays the rest.
  Restart restart;
  ASSERT_NO_FATAL_FAILURE(restart = AppendThenRestartAll(40, "snapshotted ", "after"));
  const auto& [before, last, next] = restart;
  for (int i = 0; i < 3; ++i) {
    std::map<uint64_t, std::string> mirror = MirrorOf(i);
    mirror.erase(next);
    EXPECT_EQ(mirror, before) << "replica " << i + 1;
  }
}

// libraft's log syncs every entry before it counts; the mirror is synced only before something
// relies on it: a snapshot (which lets libraft drop entries) and Sync (a store's checkpoint).
TEST_F(RaftLogTest, TheMirrorIsSyncedBeforeEachSnapshotAndWhenAskedNotAtEachCommit) {
  snapshot_threshold_ = 8;
  StartAll();
  uint64_t last = 0;
  for (int n = 0; n < 40; ++n) last = AppendOnLeader(absl::StrCat("entry ", n));
  for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(WaitForMirrored(i, last));
  for (int i = 0; i < 3; ++i) {
    // At most one snapshot per 8 entries applied, each after a sync, and none while the last
    // one is still being written: on a loaded machine (CI's other tests) a replica took only 1
    // or 2 of the 5, with or without RaftIoGuard. What matters: synced before a snapshot, and
    // far from once per commit (40).
    EXPECT_GE(mirror_syncs_[i].load(), 1) << "replica " << i + 1;
    EXPECT_LE(mirror_syncs_[i].load(), 10) << "replica " << i + 1;
  }
  const int before = mirror_syncs_[0].load();
  ASSERT_TRUE(replicas_[0]->Sync().ok());
  EXPECT_EQ(mirror_syncs_[0].load(), before + 1);
}

// Snapshots are spaced by bytes too: large entries reach snapshot_bytes long before the entry
// count, and each snapshot puts the count back (the mirror is synced once per snapshot).
TEST_F(RaftLogTest, EntriesThatReachTheSnapshotBytesTakeASnapshotBeforeTheEntryCount) {
  snapshot_threshold_ = 65536;
  snapshot_bytes_ = 4096;
  StartAll();
  uint64_t last = 0;
  for (int n = 0; n < 5; ++n) last = AppendOnLeader(std::string(100, 'x'));
  for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(WaitForMirrored(i, last));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(mirror_syncs_[i].load(), 0) << "replica " << i + 1;
  for (int n = 0; n < 20; ++n) last = AppendOnLeader(std::string(1000, 'y'));
  for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(WaitForMirrored(i, last));
  for (int i = 0; i < 3; ++i) {
    // 20,500 bytes: a snapshot per 4 KiB, at most 5 of them. libraft checks for a snapshot once
    // per batch it applies and not while one is being written, so a replica that received the
    // entries in a few batches takes fewer (CI once saw fewer than 3). At least one shows the
    // bytes trigger (the entry count is 65,536); at most 6 shows each one put the count back.
    // The snapshot (and its sync) follows the mirror's write of the batch it ends.
    EXPECT_TRUE(WaitUntil([&] { return mirror_syncs_[i].load() >= 1; },
                          absl::StrCat("replica ", i + 1, " takes a snapshot")));
    EXPECT_LE(mirror_syncs_[i].load(), 6) << "replica " << i + 1;
  }
}

// What an OS crash does to a mirror appended without a sync: its newest entries are gone. At the
// restart libraft applies again every entry after its last snapshot, and they are mirrored again.
TEST_F(RaftLogTest, AMirrorThatLostItsUnsyncedTailIsRefilledFromRaftsLog) {
  StartAll();
  uint64_t last = 0;
  for (int n = 0; n < 10; ++n) last = AppendOnLeader(absl::StrCat("entry ", n));
  for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(WaitForMirrored(i, last));
  const std::map<uint64_t, std::string> whole = MirrorOf(1);
  const int crashed = 0;
  replicas_[crashed].reset();
  // Zero the last 4 entries of its only segment (a 32-byte header, then entries of a 16-byte
  // header and the payload padded to 8 bytes), as if the OS never wrote them.
  int64_t offset = 32;
  int64_t lost_bytes = 0;
  for (const auto& [position, payload] : whole) {
    const int64_t bytes = (16 + static_cast<int64_t>(payload.size()) + 7) / 8 * 8;
    if (position + 4 <= last) {
      offset += bytes;
    } else {
      lost_bytes += bytes;
    }
  }
  {
    const std::string segment = OptionsFor(crashed).log_dir + "/" + LogSegmentName(1);
    std::fstream file(segment, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(file.is_open()) << segment;
    file.seekp(offset);
    const std::string zeros(static_cast<size_t>(lost_bytes), '\0');
    file.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
  }
  {
    LocalLogOptions mirror;
    mirror.dir = OptionsFor(crashed).log_dir;
    absl::StatusOr<std::unique_ptr<LocalLog>> cut = LocalLog::Open(mirror);
    ASSERT_TRUE(cut.ok()) << cut.status();
    ASSERT_EQ((*cut)->last_position(), last - 4);
  }
  ASSERT_NO_FATAL_FAILURE(Start(crashed));
  const uint64_t next = AppendOnLeader("after");
  for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(WaitForMirrored(i, next));
  EXPECT_EQ(MirrorOf(crashed), MirrorOf(1));
  EXPECT_EQ(MirrorOf(crashed).at(last), whole.at(last));
}

TEST_F(RaftLogTest, AFollowerBehindTheLeadersSnapshotSaysSoStaysBehindAndTheOthersGoOn) {
  snapshot_threshold_ = 4;
  snapshot_trailing_ = 2;
  StartAll();
  const uint64_t first = AppendOnLeader("first");
  // The leader reaches both followers before one stops (just after the start it may have heard
  // from one only, and stopping that one would leave it without a quorum).
  for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(WaitForMirrored(i, first));
  const int leader = WaitForLeader();
  const int behind = (leader + 1) % 3;
  const int other = (leader + 2) % 3;
  replicas_[behind].reset();
  uint64_t last = 0;
  for (int n = 0; n < 40; ++n) last = AppendOnLeader(absl::StrCat("while away ", n));

  // The entries it missed are behind the leader's snapshot: catching up needs the leader's
  // state, which RaftLog alone cannot fetch (ledgerd does: server/state_transfer.h), so its
  // mirror stays where it was, and its status names the snapshot it could not restore.
  // (It may still mirror what its own libraft log holds from before it stopped.)
  ASSERT_NO_FATAL_FAILURE(Start(behind));
  const uint64_t next = AppendOnLeader("after its return");
  ASSERT_NO_FATAL_FAILURE(WaitForMirrored(other, next));
  ASSERT_TRUE(WaitUntil([&] { return replicas_[behind]->Status().needs_state_through > 0; },
                        "the replica says it needs the leader's state"));
  EXPECT_GT(replicas_[behind]->Status().needs_state_through, replicas_[behind]->last_position());
  EXPECT_EQ(replicas_[other]->Status().needs_state_through, 0u);
  EXPECT_LT(replicas_[behind]->last_position(), last);
  EXPECT_EQ(committed_[behind].calls(next), 0);
  EXPECT_FALSE(replicas_[behind]->Status().leader);
  // What it did mirror is the cluster's log, position by position: no gap was filled.
  const std::map<uint64_t, std::string> whole = MirrorOf(other);
  for (const auto& [position, payload] : MirrorOf(behind)) {
    ASSERT_EQ(whole.count(position), 1u) << "position " << position;
    EXPECT_EQ(payload, whole.at(position)) << "position " << position;
  }
}

// Sent the leader's snapshot, a follower fetches the leader's state and restarts on it; the
// leader keeps its entries from the last one the follower's libraft log holds, snapshot
// after snapshot, so that it is not sent a newer snapshot when it returns
// (storage/raft_catch_up.h). Without that, the leader kept 2 entries behind each snapshot. A
// follower that never returns is let go once its entries exceed snapshot_bytes.
class RaftLogCatchUpTest : public RaftLogTest, public ::testing::WithParamInterface<bool> {
 protected:
  bool over_budget() const { return GetParam(); }
};

TEST_P(RaftLogCatchUpTest, TheLeaderKeepsItsLogForAFollowerRestartingOnItsState) {
  snapshot_threshold_ = 4;
  snapshot_trailing_ = 2;
  if (over_budget()) snapshot_bytes_ = 2000;
  // What the leader keeps for a follower being caught up is its own memory: a new leader (an
  // election on a loaded machine) starts without it, and a follower quiet for two election
  // timeouts and then heard from within the fixed count has left it. At 150 ms, one or the
  // other happened under ASan in CI (the leader kept its log from 87 with 44 held).
  election_timeout_ = absl::Seconds(1);
  StartAll();
  const uint64_t first = AppendOnLeader("first");
  for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(WaitForMirrored(i, first));
  const int leader = WaitForLeader();
  const uint64_t term = replicas_[leader]->Status().term;
  const int behind = (leader + 1) % 3;
  replicas_[behind].reset();
  for (int n = 0; n < 40; ++n) AppendOnLeader(absl::StrCat("while away ", n));
  ASSERT_NO_FATAL_FAILURE(Start(behind));
  ASSERT_TRUE(WaitUntil([&] { return replicas_[behind]->Status().needs_state_through > 0; },
                        "the replica says it needs the leader's state"));
  const uint64_t sent = replicas_[behind]->Status().needs_state_through;
  uint64_t last = 0;
  for (int n = 0; n < 10; ++n) last = AppendOnLeader(absl::StrCat("while it fetches ", n));
  const auto held_by_behind = [&]() -> uint64_t {
    const uint64_t id = static_cast<uint64_t>(behind) + 1;
    for (const auto& [member, match] : replicas_[leader]->Status().replicated) {
      if (member == id) return match;
    }
    return 0;
  };
  ASSERT_TRUE(WaitUntil([&] { return held_by_behind() >= sent; },
                        "the leader hears that the replica took the snapshot"));
  replicas_[behind].reset();  // It restarts on the fetched state.
  for (int n = 0; n < 40; ++n) {
    last = AppendOnLeader(over_budget() ? std::string(100, 'x') : absl::StrCat("restart ", n));
  }
  ASSERT_NO_FATAL_FAILURE(WaitForMirrored(leader, last));
  // What its libraft log holds: the snapshot sent, and perhaps a few entries after it (5 to 9
  // under ASan). Read now that it is stopped: read before, an acknowledgement still on its way
  // raised the leader's figure after the read (failed once in CI, under ASan).
  const uint64_t held = held_by_behind();
  const RaftStatus status = replicas_[leader]->Status();
  ASSERT_GT(status.commit_position, held + 32);  // Eight snapshots after what it holds.
  ASSERT_EQ(status.term, term) << "an election took the leader's memory of the follower";
  if (over_budget()) {
    EXPECT_GT(status.log_kept_from, held + 1);  // 4,000 bytes past it: let go.
  } else {
    EXPECT_LE(status.log_kept_from, held);
  }
}

INSTANTIATE_TEST_SUITE_P(Budget, RaftLogCatchUpTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "OverTheByteBudget" : "WithinTheByteBudget";
                         });

TEST_F(RaftLogTest, ALeaderCutOffFromBothFollowersAnswersOutcomeUnknownAndPoisonsTheLog) {
  StartAll();
  AppendOnLeader("committed");
  const int leader = WaitForLeader();
  for (int i = 0; i < 3; ++i) {
    if (i != leader) replicas_[i].reset();
  }
  // No quorum can store it: the leader steps down after an election timeout without hearing
  // from a majority, and the entry's fate is not this node's to know.
  absl::StatusOr<uint64_t> lost = replicas_[leader]->Append("no quorum");
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(lost.status().message(), HasSubstr("outcome is unknown"));
  EXPECT_EQ(replicas_[leader]->poisoned().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(replicas_[leader]->Append("refused").status(), replicas_[leader]->poisoned());

  ASSERT_TRUE(replicas_[leader]->Repair().ok());
  EXPECT_TRUE(replicas_[leader]->poisoned().ok());
  absl::StatusOr<uint64_t> alone = replicas_[leader]->Append("still alone");
  EXPECT_EQ(alone.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(WaitUntil([&] { return !replicas_[leader]->Status().leader; },
                        "the cut-off replica reports that it no longer leads"));
}

// What a caller of Propose learns, in the order the outcomes came.
class Outcomes {
 public:
  RaftLog::Decided For(std::string name) {
    return [this, name = std::move(name)](absl::StatusOr<uint64_t> outcome) {
      MutexLock lock(&mu_);
      outcomes_.emplace_back(name, std::move(outcome));
    };
  }
  std::vector<std::pair<std::string, absl::StatusOr<uint64_t>>> outcomes() const {
    MutexLock lock(&mu_);
    return outcomes_;
  }
  size_t size() const { return outcomes().size(); }

 private:
  mutable Mutex mu_;
  std::vector<std::pair<std::string, absl::StatusOr<uint64_t>>> outcomes_ ABSL_GUARDED_BY(mu_);
};

// A leader keeps several entries in flight (ledgerd --raft_writes_in_flight): proposed without
// waiting, they take consecutive positions in the order proposed and are decided in that order,
// each once it is committed and in the mirror.
TEST_F(RaftLogTest, ProposalsInFlightCommitInTheOrderProposed) {
  StartAll();
  AppendOnLeader("first");
  const int leader = WaitForLeader();
  Outcomes outcomes;
  constexpr int kProposals = 20;
  for (int n = 0; n < kProposals; ++n) {
    replicas_[leader]->Propose(absl::StrCat("p", n), outcomes.For(absl::StrCat("p", n)));
  }
  ASSERT_TRUE(WaitUntil([&] { return outcomes.size() == kProposals; }, "every proposal decided"));
  const auto decided = outcomes.outcomes();
  ASSERT_TRUE(decided[0].second.ok()) << decided[0].second.status();
  const uint64_t first = *decided[0].second;
  for (int n = 0; n < kProposals; ++n) {
    EXPECT_EQ(decided[n].first, absl::StrCat("p", n));
    ASSERT_TRUE(decided[n].second.ok()) << decided[n].second.status();
    EXPECT_EQ(*decided[n].second, first + static_cast<uint64_t>(n));
    // Mirrored here before the caller hears of it, and seen once by on_committed.
    EXPECT_EQ(committed_[leader].payloads()[first + n], absl::StrCat("p", n));
  }
  for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(WaitForMirrored(i, first + kProposals - 1));
  for (int i = 0; i < 3; ++i) {
    for (int n = 0; n < kProposals; ++n) EXPECT_EQ(committed_[i].calls(first + n), 1);
  }
}

// Entries in flight when the leader loses its quorum: each is outcome unknown, in order, and
// one proposed after the first failure is refused without being proposed, until Repair.
TEST_F(RaftLogTest, ProposalsBehindALostLeadershipAreUnknownOrRefusedNeverCommittedLater) {
  StartAll();
  AppendOnLeader("committed");
  const int leader = WaitForLeader();
  for (int i = 0; i < 3; ++i) {
    if (i != leader) replicas_[i].reset();
  }
  Outcomes outcomes;
  replicas_[leader]->Propose("lost 1", outcomes.For("lost 1"));
  replicas_[leader]->Propose("lost 2", outcomes.For("lost 2"));
  ASSERT_TRUE(WaitUntil([&] { return outcomes.size() == 2; }, "both proposals decided"));
  const auto decided = outcomes.outcomes();
  EXPECT_EQ(decided[0].first, "lost 1");
  EXPECT_EQ(decided[1].first, "lost 2");
  for (const auto& [name, outcome] : decided) {
    EXPECT_EQ(outcome.status().code(), absl::StatusCode::kUnavailable) << name;
  }
  EXPECT_THAT(decided[0].second.status().message(), HasSubstr("outcome is unknown"));
  EXPECT_EQ(replicas_[leader]->poisoned().code(), absl::StatusCode::kUnavailable);
  // Refused on the caller's thread, before anything is queued.
  replicas_[leader]->Propose("after", outcomes.For("after"));
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_EQ(outcomes.outcomes()[2].second.status(), replicas_[leader]->poisoned());
}

}  // namespace
}  // namespace ledger::storage
