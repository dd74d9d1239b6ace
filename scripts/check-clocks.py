#!/usr/bin/env python3
"""Fails when production code times a wait or measures an interval on the wall clock.

Usage: check-clocks.py [--root DIR]   (default: the repository this script is in)

Abseil 20220623 (Debian 12's) turns every timed wait into a deadline on the wall clock, so a
clock set back stretches the waits in progress by as much; ledgerd waits and measures on the
monotonic clock instead (base/steady_wait.h says why). In every tracked .h and .cc file outside
tests/, bench/, fuzz/ and sim/:
  - no absl::Notification, absl::CondVar, or Abseil's timed Mutex waits
    (use base/steady_wait.h's SteadyNotification and SteadyCondVar);
  - no arithmetic or comparison on absl::Now() (use SteadyNow, SteadyDeadline, SteadySince),
    except in client/, whose --deadline is a wall-clock time point as gRPC's C++ API takes it.
absl::Now() alone, a time to record or show, is fine. Exit 0 when every file keeps to this, 1
with one line per use that does not.
"""
import argparse
import pathlib
import re
import subprocess
import sys

EXEMPT = ("tests/", "bench/", "fuzz/", "sim/")
TIMED_WAIT = re.compile(
    r'absl/synchronization/notification\.h|absl::Notification\b|absl::CondVar\b|'
    r'\b(?:Await|Wait|LockWhen|ReaderLockWhen|WriterLockWhen)With(?:Timeout|Deadline)\b|'
    r'\bWaitForNotificationWithDeadline\b')
WALL_ARITHMETIC = re.compile(r'absl::Now\(\)\s*(?:[-+<>]|==|!=)|(?:[-+<>]|==|!=)=?\s*absl::Now\(\)')


def tracked_sources(root: pathlib.Path) -> list:
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-co", "--exclude-standard",
                             "*.h", "*.cc"], check=True, capture_output=True, text=True)
    return [line for line in listed.stdout.splitlines() if line and not line.startswith(EXEMPT)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=pathlib.Path(__file__).resolve().parent.parent,
                        type=pathlib.Path)
    root = parser.parse_args().root
    problems = []
    for path in tracked_sources(root):
        if path == "base/steady_wait.h":
            continue  # Says what it replaces.
        for number, line in enumerate((root / path).read_text(errors="replace").splitlines(), 1):
            code = line.split("//", 1)[0]
            if TIMED_WAIT.search(code):
                problems.append(f"{path}:{number}: an Abseil timed wait or notification, which "
                                "follows the wall clock; use SteadyNotification or SteadyCondVar "
                                "(base/steady_wait.h)")
            elif not path.startswith("client/") and WALL_ARITHMETIC.search(code):
                problems.append(f"{path}:{number}: an interval or deadline on the wall clock "
                                "(absl::Now()); use SteadyNow, SteadyDeadline or SteadySince "
                                "(base/steady_wait.h)")
    for problem in problems:
        print(problem)
    if problems:
        print(f"check-clocks: {len(problems)} use(s) of the wall clock for waiting or timing")
        return 1
    print("check-clocks: every wait and interval runs on the monotonic clock")
    return 0


if __name__ == "__main__":
    sys.exit(main())
