#!/usr/bin/env python3
"""The floor under a journal commit: one write + fdatasync on this disk, for the ways a log file
can be laid out (issue 13, item 7; docs/journal-tuning.md).

ext4's fdatasync must commit a journal transaction when the write changed metadata that is
needed to read the data back: the file's size (an append) or its extent map (a block newly
allocated, or a preallocated "unwritten" block written for the first time). An overwrite of
blocks already written changes neither, and flushes only the data. The layouts:

  append          a new file, each record appended (size and allocation change every time)
  keep_size       fallocate(FALLOC_FL_KEEP_SIZE) first, then append: RocksDB's WAL today
                  (blocks allocated but unwritten, size still grows)
  posix_fallocate posix_fallocate first (size set, blocks unwritten), records written in place
  overwrite       a file already written and synced, records written over it: a recycled WAL

In each round the four files take turns record by record (a shared disk's bad moments fall on all
of them alike); the table gives the median over the rounds of each round's p50. Usage: python3 bench/fsync_floor.py [--dir /tmp] [--syncs 2000]
[--rounds 5] [--sizes 256,40960]
"""
import argparse
import ctypes
import os
import statistics
import tempfile
import time

FALLOC_FL_KEEP_SIZE = 1
LIBC = ctypes.CDLL("libc.so.6", use_errno=True)
LIBC.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]


def prepare(path, layout, total):
    fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o644)
    if layout == "keep_size":
        if LIBC.fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, total) != 0:
            raise OSError(ctypes.get_errno(), "fallocate")
    elif layout == "posix_fallocate":
        os.posix_fallocate(fd, 0, total)
    elif layout == "overwrite":
        chunk = b"\0" * (1 << 20)
        for offset in range(0, total, len(chunk)):
            os.pwrite(fd, chunk, offset)
        os.fsync(fd)
    os.fsync(fd)
    return fd


def run(directory, layouts, size, syncs):
    """Per layout, (p50, p99) microseconds of one pwrite + fdatasync over `syncs` records of `size`
    bytes. The layouts take turns record by record (the order rotating), so that all of them see
    the same moments of a shared disk."""
    total = size * syncs + (1 << 20)
    record = os.urandom(size)
    times = {layout: [] for layout in layouts}
    with tempfile.TemporaryDirectory(dir=directory, prefix="fsync-floor-") as tmp:
        fds = {layout: prepare(os.path.join(tmp, layout), layout, total) for layout in layouts}
        try:
            for i in range(syncs):
                for k in range(len(layouts)):
                    layout = layouts[(i + k) % len(layouts)]
                    start = time.perf_counter()
                    os.pwrite(fds[layout], record, i * size)
                    os.fdatasync(fds[layout])
                    times[layout].append(time.perf_counter() - start)
        finally:
            for fd in fds.values():
                os.close(fd)
    result = {}
    for layout, t in times.items():
        t.sort()
        result[layout] = (t[len(t) // 2] * 1e6, t[int(len(t) * 0.99)] * 1e6)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=os.environ.get("TMPDIR", "/tmp"))
    parser.add_argument("--syncs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", default="256,40960")
    args = parser.parse_args()
    layouts = ["append", "keep_size", "posix_fallocate", "overwrite"]
    sizes = [int(s) for s in args.sizes.split(",")]
    results = {(layout, size): [] for layout in layouts for size in sizes}
    for _ in range(args.rounds):
        for size in sizes:
            for layout, result in run(args.dir, layouts, size, args.syncs).items():
                results[(layout, size)].append(result)
    print(f"dir={args.dir} syncs={args.syncs} per layout per round, rounds={args.rounds}; "
          "p50: median over the rounds of each round's p50 (min-max over the rounds); "
          "p99: median of the rounds' p99; microseconds")
    print("| layout | " + " | ".join(f"{s} B p50 | {s} B p99" for s in sizes) + " |")
    print("|---|" + "---|---|" * len(sizes))
    for layout in layouts:
        cells = []
        for size in sizes:
            p50s = [r[0] for r in results[(layout, size)]]
            p99s = [r[1] for r in results[(layout, size)]]
            cells.append(f"{statistics.median(p50s):.0f} ({min(p50s):.0f}-{max(p50s):.0f})")
            cells.append(f"{statistics.median(p99s):.0f}")
        print(f"| {layout} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
