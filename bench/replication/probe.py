#!/usr/bin/env python3
"""The two figures every spike result leans on, measured the same way each run (issue 17).

  probe.py echo PORT            serve a TCP echo on 127.0.0.1:PORT until killed
  probe.py rtt HOST PORT [N]    N (2000) round trips of 64 bytes; prints p50/min/p99 in ms
  probe.py fsync DIR [N]        N (500) 4 KiB pwrite + fdatasync in DIR; prints p50/p99 in ms

rtt is run from the client namespace against an echo behind delay_proxy, so it is the round trip
the engines' own traffic sees (the relay's 2 x 0.5 ms plus its scheduling); fsync is what one
durable append of a small entry costs on the disk that holds the replicas' data.
"""
import os
import socket
import statistics
import sys
import time


def percentile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def echo(port):
    server = socket.create_server(("127.0.0.1", port))
    while True:
        conn, _ = server.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)


def rtt(host, port, n):
    payload = b"x" * 64
    with socket.create_connection((host, port), timeout=5) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        samples = []
        for _ in range(n):
            start = time.perf_counter()
            conn.sendall(payload)
            received = 0
            while received < len(payload):
                chunk = conn.recv(len(payload) - received)
                if not chunk:
                    sys.exit("probe.py: echo closed the connection")
                received += len(chunk)
            samples.append((time.perf_counter() - start) * 1e3)
    samples.sort()
    print(f"rtt_ms p50={statistics.median(samples):.3f} min={samples[0]:.3f} "
          f"p99={percentile(samples, 0.99):.3f} n={n}")


def fsync(directory, n):
    path = os.path.join(directory, "probe-fsync.tmp")
    block = b"\0" * 4096
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, block * n)  # Allocate first: the figure is the sync, not block allocation.
        os.fsync(fd)
        samples = []
        for i in range(n):
            start = time.perf_counter()
            os.pwrite(fd, block, i * 4096)
            os.fdatasync(fd)
            samples.append((time.perf_counter() - start) * 1e3)
    finally:
        os.close(fd)
        os.unlink(path)
    samples.sort()
    print(f"fsync_4k_ms p50={statistics.median(samples):.3f} p99={percentile(samples, 0.99):.3f} "
          f"n={n}")


def main(argv):
    try:
        if argv[1:2] == ["echo"] and len(argv) == 3:
            return echo(int(argv[2]))
        if argv[1:2] == ["rtt"] and len(argv) in (4, 5):
            return rtt(argv[2], int(argv[3]), int(argv[4]) if len(argv) == 5 else 2000)
        if argv[1:2] == ["fsync"] and len(argv) in (3, 4):
            return fsync(argv[2], int(argv[3]) if len(argv) == 4 else 500)
    except ValueError as error:
        sys.exit(f"probe.py: {error}")
    sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
