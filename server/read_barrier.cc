#include "server/read_barrier.h"

#include <pthread.h>

#include <utility>

namespace ledger {

ReadBarrier::ReadBarrier(std::function<absl::Status()> confirm)
    : confirm_(std::move(confirm)), thread_([this] { Run(); }) {}

ReadBarrier::~ReadBarrier() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void ReadBarrier::After(Continuation then) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      waiting_.push_back(std::move(then));
      return;
    }
  }
  std::move(then)(absl::UnavailableError("the server is stopping"));
}

void ReadBarrier::Run() {
  pthread_setname_np(pthread_self(), "ledger-readbar");
  std::vector<Continuation> round;
  while (true) {
    bool stopping = false;
    {
      absl::MutexLock lock(&mu_);
      const auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !waiting_.empty() || stopping_;
      };
      mu_.Await(absl::Condition(&ready));
      round.swap(waiting_);
      stopping = stopping_;
    }
    // Every read of this round arrived before the barrier is proposed.
    const absl::Status confirmed =
        stopping ? absl::UnavailableError("the server is stopping") : confirm_();
    (confirmed.ok() ? barriers_ : failures_).fetch_add(1, std::memory_order_relaxed);
    for (Continuation& then : round) std::move(then)(confirmed);
    round.clear();
    if (stopping) {
      absl::MutexLock lock(&mu_);
      if (waiting_.empty()) return;
    }
  }
}

}  // namespace ledger
