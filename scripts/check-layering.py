#!/usr/bin/env python3
"""Fails when a folder includes from a folder it must not: the table of "Layers" in
docs/architecture.md, made executable.

Usage: check-layering.py [--root DIR]   (default: the repository this script is in)

The table lies between the lines "<!-- layers: begin -->" and "<!-- layers: end -->" of
docs/architecture.md: one row per folder, "| `folder/` | `a/`, `b/` |" (or "none" or "any").
Every tracked .h and .cc file of a folder in the table may include, of the project's own
folders, only itself and the folders its row names. Generated headers count as the folder of
their .proto: "ledger/v1/..." and "google/rpc/..." are proto/'s. Exit 0 when every include keeps
to the table, 1 with one line per include that does not, 2 when the table cannot be read.
"""
import argparse
import pathlib
import re
import subprocess
import sys

BEGIN, END = "<!-- layers: begin -->", "<!-- layers: end -->"
ROW = re.compile(r"^\|\s*`([a-z_]+)/`\s*\|\s*(.*?)\s*\|")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_table(architecture: pathlib.Path) -> dict:
    text = architecture.read_text()
    if BEGIN not in text or END not in text:
        sys.exit(f"check-layering: no table between {BEGIN} and {END} in {architecture}")
    allowed = {}
    for line in text.split(BEGIN, 1)[1].split(END, 1)[0].splitlines():
        row = ROW.match(line)
        if not row:
            continue
        folder, cell = row.group(1), row.group(2)
        if cell.strip() == "any":
            allowed[folder] = None
        else:
            allowed[folder] = set(re.findall(r"`([a-z_]+)/`", cell)) | {folder}
    if not allowed:
        sys.exit(f"check-layering: the table in {architecture} has no rows")
    return allowed


def folder_of(include: str, folders: set):
    """The project folder an include path belongs to, or None for a library's header."""
    parts = include.split("/")
    if parts[0] == "ledger" or parts[:2] == ["google", "rpc"]:
        return "proto"
    return parts[0] if len(parts) > 1 and parts[0] in folders else None


def tracked_sources(root: pathlib.Path) -> list:
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-co", "--exclude-standard",
                             "*.h", "*.cc"], check=True, capture_output=True, text=True)
    return [line for line in listed.stdout.splitlines() if line]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=pathlib.Path(__file__).resolve().parent.parent,
                        type=pathlib.Path)
    root = parser.parse_args().root
    allowed = read_table(root / "docs" / "architecture.md")
    folders = set(allowed)
    problems = []
    for path in tracked_sources(root):
        folder = path.split("/", 1)[0]
        if allowed.get(folder) is None:
            continue  # Not in the table, or "any" (tests/, bench/, fuzz/).
        for number, line in enumerate((root / path).read_text(errors="replace").splitlines(), 1):
            include = INCLUDE.match(line)
            if not include:
                continue
            target = folder_of(include.group(1), folders)
            if target is not None and target not in allowed[folder]:
                may = ", ".join(f"{name}/" for name in sorted(allowed[folder] - {folder}))
                problems.append(f"{path}:{number}: includes {include.group(1)}, but {folder}/ may "
                                f"include only from {may or 'nothing of the project'} besides "
                                f"itself (docs/architecture.md, \"Layers\")")
    for problem in problems:
        print(problem)
    if problems:
        print(f"check-layering: {len(problems)} include(s) cross a layer the wrong way")
        return 1
    print(f"check-layering: every include keeps to the layers ({len(folders)} folders)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
