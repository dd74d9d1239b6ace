#!/usr/bin/env python3
"""Tests scripts/check-clocks.py: the repository waits and times on the monotonic clock, and
planted waits and intervals on the wall clock are caught with their place and the fix."""
import pathlib
import subprocess
import sys
import tempfile
import unittest

SOURCE = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = SOURCE / "scripts" / "check-clocks.py"


def run(root: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(root)],
                          capture_output=True, text=True, check=False)


class CheckClocksTest(unittest.TestCase):
    def test_the_repository_waits_on_the_monotonic_clock(self):
        result = run(SOURCE)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("every wait and interval runs on the monotonic clock", result.stdout)

    def test_planted_wall_clock_waits_and_intervals_fail_with_their_place(self):
        files = {
            "server/waits.cc": (
                '#include "absl/synchronization/notification.h"\n'
                "void A(absl::Mutex& mu) { mu.AwaitWithTimeout(c, absl::Seconds(1)); }\n"
                "absl::CondVar changed;\n"
                "bool fine = stop.WaitForNotificationWithTimeout(absl::Seconds(1));\n"),
            "storage/interval.cc": (
                "const absl::Time start = absl::Now();\n"
                "auto took = absl::Now() - start;\n"
                "bool late = deadline <= absl::Now();  // absl::Now() - x in a comment is fine\n"),
            # Wall-clock deadlines are gRPC's in the clients; tests may use anything.
            "client/deadline.cc": "auto left = deadline - absl::Now();\n",
            "tests/any_test.cc": "absl::Notification done; auto t = absl::Now() + d;\n",
        }
        with tempfile.TemporaryDirectory() as scratch:
            root = pathlib.Path(scratch)
            for name, text in files.items():
                (root / name).parent.mkdir(parents=True, exist_ok=True)
                (root / name).write_text(text)
            subprocess.run(["git", "init", "-q", str(root)], check=True)
            result = run(root)
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        flagged = [line.split(": ", 1)[0] for line in result.stdout.splitlines()[:-1]]
        self.assertEqual(flagged, ["server/waits.cc:1", "server/waits.cc:2", "server/waits.cc:3",
                                   "storage/interval.cc:2", "storage/interval.cc:3"])
        self.assertIn("use SteadyNotification or SteadyCondVar (base/steady_wait.h)", result.stdout)
        self.assertIn("use SteadyNow, SteadyDeadline or SteadySince", result.stdout)
        self.assertIn("check-clocks: 5 use(s) of the wall clock", result.stdout)


if __name__ == "__main__":
    unittest.main()
