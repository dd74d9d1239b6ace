"""A minimal gRPC-over-HTTP/2 client and the measurements the hostile-client probes share.

Only the standard library and Debian's python3-h2: ledger.v1 messages are encoded by hand (each
is one or three fields), so the probes run without grpcio or generated code.
"""
import socket
import struct
import time

import h2.config
import h2.connection
import h2.events

BALANCE_PATH = "/ledger.v1.Ledger/Balance"
DEPOSIT_PATH = "/ledger.v1.Ledger/Deposit"


def _varint(value):
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _string_field(number, text):
    data = text.encode()
    return bytes([number << 3 | 2]) + _varint(len(data)) + data


def balance_request(account_id):
    """BalanceRequest{account_id}."""
    return _string_field(1, account_id)


def deposit_request(account_id, amount, request_id=""):
    """DepositRequest{account_id, amount, request_id}."""
    body = _string_field(1, account_id) + bytes([2 << 3]) + _varint(amount)
    return body + (_string_field(3, request_id) if request_id else b"")


def grpc_frame(message):
    """The gRPC length-prefixed message: not compressed, 4-byte big-endian length."""
    return struct.pack(">BI", 0, len(message)) + message


def request_headers(path, authority):
    return [(":method", "POST"), (":scheme", "http"), (":path", path),
            (":authority", authority), ("content-type", "application/grpc"), ("te", "trailers")]


# HTTP/2's error code for a stream the server did not process (RFC 9113 7).
REFUSED_STREAM = 7


class StreamRefused(ConnectionError):
    """The server reset the stream with REFUSED_STREAM: nothing was processed, safe to retry."""


class GrpcConnection:
    """One HTTP/2 connection that makes unary calls one at a time. Not thread-safe."""

    def __init__(self, host, port, timeout, source=None):
        self.authority = f"{host}:{port}"
        self.sock = socket.create_connection((host, port), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        self.sock.settimeout(timeout)
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.h2.initiate_connection()
        self.sock.sendall(self.h2.data_to_send())

    def close(self):
        self.sock.close()

    def unary(self, path, message, deadline_seconds):
        """Returns (grpc-status as int or None, grpc-message, response body bytes)."""
        stream_id = self.h2.get_next_available_stream_id()
        headers = request_headers(path, self.authority)
        headers.append(("grpc-timeout", f"{max(1, int(deadline_seconds * 1000))}m"))
        self.h2.send_headers(stream_id, headers)
        self.h2.send_data(stream_id, grpc_frame(message), end_stream=True)
        self.sock.sendall(self.h2.data_to_send())
        body, trailers = b"", {}
        end = time.monotonic() + deadline_seconds
        while time.monotonic() < end:
            self.sock.settimeout(max(0.01, end - time.monotonic()))
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("connection closed by the server")
            for event in self.h2.receive_data(data):
                if isinstance(event, h2.events.DataReceived) and event.stream_id == stream_id:
                    body += event.data
                    self.h2.acknowledge_received_data(event.flow_controlled_length, stream_id)
                elif isinstance(event, (h2.events.TrailersReceived, h2.events.ResponseReceived)) \
                        and event.stream_id == stream_id:
                    trailers.update((k.decode() if isinstance(k, bytes) else k,
                                     v.decode() if isinstance(v, bytes) else v)
                                    for k, v in event.headers)
                elif isinstance(event, h2.events.StreamReset) and event.stream_id == stream_id:
                    if event.error_code == REFUSED_STREAM:
                        raise StreamRefused(f"stream refused by the server: {event.error_code}")
                    raise ConnectionError(f"stream reset by the server: {event.error_code}")
                elif isinstance(event, h2.events.ConnectionTerminated):
                    raise ConnectionError(f"GOAWAY from the server: {event.error_code}")
            self.sock.sendall(self.h2.data_to_send())
            if "grpc-status" in trailers:
                self.last_trailers = trailers  # For the caller that wants more than the status.
                return int(trailers["grpc-status"]), trailers.get("grpc-message", ""), body[5:]
        raise TimeoutError(f"no answer within {deadline_seconds} s")


def decode_int64_field1(body):
    """The int64 field 1 (`balance`) of a response, 0 when absent."""
    if not body or body[0] != 0x08:
        return 0
    value, shift = 0, 0
    for byte in body[1:]:
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    return value - (1 << 64) if value >= 1 << 63 else value


def unary_call(host, port, path, message, deadline_seconds, source=None, attempts=3):
    """A unary call on a fresh connection, sent again (on another fresh connection, at most
    `attempts` times in all) when the server refuses its stream. REFUSED_STREAM means the request
    was not processed (RFC 9113 8.7), and gRPC's own clients retry it transparently; HAProxy
    answers it when the connection to ledgerd it chose was closing. Returns (grpc-status,
    grpc-message, body); raises what GrpcConnection raises once the attempts are used up."""
    for attempt in range(attempts):
        connection = GrpcConnection(host, port, deadline_seconds, source)
        try:
            return connection.unary(path, message, deadline_seconds)
        except StreamRefused:
            if attempt + 1 == attempts:
                raise
            time.sleep(0.1)
        finally:
            connection.close()


def timed_call(host, port, path, message, deadline_seconds=1.0, source=None):
    """A unary call on a fresh connection from address `source` (default: any):
    (ok, seconds, detail). Never raises."""
    start = time.monotonic()
    try:
        connection = GrpcConnection(host, port, deadline_seconds, source)
        try:
            status, text, _ = connection.unary(path, message, deadline_seconds)
        finally:
            connection.close()
        return status == 0, time.monotonic() - start, f"grpc-status {status} {text}"
    except (OSError, ConnectionError, TimeoutError) as error:
        return False, time.monotonic() - start, f"{type(error).__name__}: {error}"


def rss_bytes(pid):
    """VmRSS of `pid` from /proc, in bytes (0 when the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def open_fds(pid):
    try:
        import os
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def http_get_status(host, port, path, timeout):
    """The status code of GET `path` (HTTP/1.0), or 0 when no answer came within `timeout`."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
            head = sock.recv(64)
            return int(head.split()[1]) if head.startswith(b"HTTP/1.") else 0
    except (OSError, ValueError, IndexError):
        return 0
