#!/usr/bin/env python3
"""A Watch client that reads one message a second (issue 33's slow watcher), for
bench/watch_bench.py --slow.

It speaks gRPC over HTTP/2 with Debian's python3-h2 and reads the way a slow consumer does: the
HTTP/2 flow-control window (64 KiB, the protocol's default) is given back only for the message it
has consumed, one message per --interval, so ledgerd can send no faster than that. A message
larger than the window is consumed over as many intervals as it takes. WatchRequest is
{start_at_end: true}.

On SIGTERM or SIGINT, or when the stream ends, prints one JSON line: messages consumed, the last
position consumed, and how the stream ended (null while it was still open).

Usage: python3 bench/slow_watcher.py --target 127.0.0.1:PORT [--interval 1.0]"""
import argparse
import json
import signal
import socket
import struct
import sys
import time

import h2.config
import h2.connection
import h2.events

WATCH_PATH = "/ledger.v1.Ledger/Watch"
START_AT_END = bytes([3 << 3, 1])  # WatchRequest{start_at_end: true}
WATCH_RESPONSE_POSITION = 2  # WatchResponse.position, a uint64


def read_varint(data, at):
    value, shift = 0, 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def response_position(message):
    """WatchResponse.position of a serialized WatchResponse (0 when absent)."""
    at, position = 0, 0
    while at < len(message):
        key, at = read_varint(message, at)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, at = read_varint(message, at)
            if number == WATCH_RESPONSE_POSITION:
                position = value
        elif wire_type == 2:
            length, at = read_varint(message, at)
            at += length
        elif wire_type == 1:
            at += 8
        elif wire_type == 5:
            at += 4
        else:
            raise ValueError(f"wire type {wire_type} in a WatchResponse")
    return position


class SlowWatcher:
    def __init__(self, host, port):
        self.sock = socket.create_connection((host, port), timeout=5)
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.h2.initiate_connection()
        self.stream_id = self.h2.get_next_available_stream_id()
        self.h2.send_headers(self.stream_id, [
            (":method", "POST"), (":scheme", "http"), (":path", WATCH_PATH),
            (":authority", f"{host}:{port}"), ("content-type", "application/grpc"),
            ("te", "trailers")])
        self.h2.send_data(self.stream_id, struct.pack(">BI", 0, len(START_AT_END)) + START_AT_END,
                          end_stream=True)
        self.sock.sendall(self.h2.data_to_send())
        self.buffer = bytearray()  # Received, not yet consumed (gRPC frames).
        self.unacknowledged = 0  # Bytes received whose window has not been given back.
        self.messages = 0
        self.last_position = 0
        self.ended = None

    def receive(self, seconds):
        """Takes what ledgerd sends for up to `seconds`, without giving back any window."""
        end = time.monotonic() + seconds
        while self.ended is None and time.monotonic() < end:
            self.sock.settimeout(max(0.01, end - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return
            if not data:
                self.ended = "connection closed"
                return
            for event in self.h2.receive_data(data):
                if isinstance(event, h2.events.DataReceived):
                    self.buffer += event.data
                    self.unacknowledged += event.flow_controlled_length
                elif isinstance(event, h2.events.TrailersReceived):
                    headers = {k.decode() if isinstance(k, bytes) else k:
                               v.decode() if isinstance(v, bytes) else v for k, v in event.headers}
                    self.ended = (f"grpc-status {headers.get('grpc-status')} "
                                  f"{headers.get('grpc-message', '')}").strip()
                elif isinstance(event, h2.events.StreamReset):
                    self.ended = f"stream reset {event.error_code}"
                elif isinstance(event, h2.events.ConnectionTerminated):
                    self.ended = f"GOAWAY {event.error_code}"
            self.sock.sendall(self.h2.data_to_send())

    def consume_one(self):
        """Consumes the first whole message received and gives its window back; when only part
        of one has arrived, gives back what arrived (the reader is part-way through it)."""
        if len(self.buffer) >= 5:
            length = struct.unpack(">I", self.buffer[1:5])[0]
            if len(self.buffer) >= 5 + length:
                message = bytes(self.buffer[5:5 + length])
                del self.buffer[:5 + length]
                self.messages += 1
                self.last_position = response_position(message) or self.last_position
                self.give_back(5 + length)
                return
        self.give_back(self.unacknowledged)

    def give_back(self, size):
        size = min(size, self.unacknowledged)
        if size > 0 and self.ended is None:
            self.h2.acknowledge_received_data(size, self.stream_id)
            self.sock.sendall(self.h2.data_to_send())
        self.unacknowledged -= size


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="host:port of ledgerd")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds per message read")
    args = parser.parse_args()
    host, port = args.target.rsplit(":", 1)
    watcher = SlowWatcher(host, int(port))
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    while not stopping and watcher.ended is None:
        watcher.receive(args.interval)
        if not stopping:
            watcher.consume_one()
    print(json.dumps({"messages": watcher.messages, "last_position": watcher.last_position,
                      "ended": watcher.ended}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
