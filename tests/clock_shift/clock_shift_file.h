// Test helper: the file through which a test moves the wall clock of a process it starts with
// the clock-shift library preloaded (tests/clock_shift/clock_shift.cc says how that works).
#ifndef LEDGER_TESTS_CLOCK_SHIFT_CLOCK_SHIFT_FILE_H_
#define LEDGER_TESTS_CLOCK_SHIFT_CLOCK_SHIFT_FILE_H_

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/test_paths.h"

namespace ledger::testing_util {

class ClockShiftFile {
 public:
  // Creates (or truncates) `path` holding no shift.
  explicit ClockShiftFile(std::string path) : path_(std::move(path)) {
    const int fd = open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    EXPECT_GE(fd, 0) << "cannot create " << path_;
    if (fd < 0) return;
    EXPECT_EQ(ftruncate(fd, sizeof(int64_t)), 0);
    void* view = mmap(nullptr, sizeof(int64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    EXPECT_NE(view, MAP_FAILED) << "cannot map " << path_;
    if (view != MAP_FAILED) shift_ = static_cast<int64_t*>(view);
  }
  ~ClockShiftFile() {
    if (shift_ != nullptr) munmap(shift_, sizeof(int64_t));
  }
  ClockShiftFile(const ClockShiftFile&) = delete;
  ClockShiftFile& operator=(const ClockShiftFile&) = delete;

  // From now on, the wall clock of every process started with Environment() reads the true
  // time plus `shift` (negative: behind). One aligned store, which a reader never sees torn.
  void Set(absl::Duration shift) {
    if (shift_ != nullptr) {
      std::atomic_ref<int64_t>(*shift_).store(absl::ToInt64Nanoseconds(shift));
    }
  }

  // The variables that preload the library and name this file. AddressSanitizer's runtime
  // insists on being the first library loaded; the clock-shift library has no instrumentation,
  // so that check is turned off (the options already set are kept).
  std::vector<std::string> Environment() const {
    const char* asan_options = std::getenv("ASAN_OPTIONS");
    return {"LD_PRELOAD=" + ClockShiftLibraryPath(), "LEDGER_CLOCK_SHIFT_FILE=" + path_,
            absl::StrCat("ASAN_OPTIONS=", asan_options != nullptr ? asan_options : "",
                         asan_options != nullptr && *asan_options != '\0' ? ":" : "",
                         "verify_asan_link_order=0")};
  }

 private:
  std::string path_;
  int64_t* shift_ = nullptr;
};

}  // namespace ledger::testing_util

#endif  // LEDGER_TESTS_CLOCK_SHIFT_CLOCK_SHIFT_FILE_H_
