#!/usr/bin/env python3
"""Prints the slowest tests of ctest runs as Markdown tables, from the JUnit files that make test
writes (build/<tree>/ctest-junit.xml; docs/testing.md, "Where the time goes").

Usage: scripts/slowest-tests.py [--top N] NAME=JUNIT.xml [NAME=JUNIT.xml ...]
"""
import argparse
import re
import sys
import xml.etree.ElementTree as ET


def cases(path):
    root = ET.parse(path).getroot()
    found = []
    for case in root.iter("testcase"):
        # gtest's parameter dumps ("  # GetParam() = ...") say nothing a reader needs here.
        name = re.sub(r"\s+# GetParam\(\).*$", "", case.get("name"))
        found.append((float(case.get("time", 0)), name))
    return sorted(found, reverse=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("runs", nargs="+", metavar="NAME=JUNIT.xml")
    args = parser.parse_args()
    for run in args.runs:
        if "=" not in run:
            sys.exit(f"slowest-tests: expected NAME=JUNIT.xml, got {run!r}")
        name, path = run.split("=", 1)
        found = cases(path)
        total = sum(seconds for seconds, _ in found)
        print(f"**{name}**: {len(found)} tests, {total:.0f} s of test time in all\n")
        print("| s | test |\n|---:|---|")
        for seconds, test in found[:args.top]:
            print(f"| {seconds:.1f} | `{test}` |")
        print()


if __name__ == "__main__":
    main()
