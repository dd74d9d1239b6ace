#!/usr/bin/env python3
"""Tests scripts/check-layering.py: the repository keeps to its layers, and a planted include
that crosses one is caught with a message that names the file, the line and the rule."""
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = SOURCE / "scripts" / "check-layering.py"


def run(root: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(root)],
                          capture_output=True, text=True, check=False)


class CheckLayeringTest(unittest.TestCase):
    def test_the_repository_keeps_to_its_layers(self):
        result = run(SOURCE)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("every include keeps to the layers", result.stdout)

    def test_a_planted_wrong_include_fails_with_its_place_and_rule(self):
        with tempfile.TemporaryDirectory() as scratch:
            root = pathlib.Path(scratch)
            (root / "docs").mkdir()
            shutil.copy(SOURCE / "docs" / "architecture.md", root / "docs" / "architecture.md")
            (root / "client").mkdir()
            (root / "client" / "planted.cc").write_text(
                '#include "client/planted.h"\n#include "absl/strings/str_cat.h"\n'
                '#include "shard/router.h"\n')
            (root / "shard").mkdir()
            (root / "shard" / "fine.cc").write_text('#include "base/check.h"\n')
            subprocess.run(["git", "init", "-q", str(root)], check=True)
            result = run(root)
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertIn("client/planted.cc:3: includes shard/router.h, but client/ may include only "
                      "from base/, cli/, proto/ besides itself", result.stdout)
        self.assertIn("1 include(s) cross a layer the wrong way", result.stdout)

    def test_a_missing_table_is_an_error_not_a_pass(self):
        with tempfile.TemporaryDirectory() as scratch:
            root = pathlib.Path(scratch)
            (root / "docs").mkdir()
            (root / "docs" / "architecture.md").write_text("# no table\n")
            subprocess.run(["git", "init", "-q", str(root)], check=True)
            result = run(root)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("no table", result.stderr)


if __name__ == "__main__":
    unittest.main()
