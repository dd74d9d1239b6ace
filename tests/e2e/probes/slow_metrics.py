#!/usr/bin/python3
"""Slow /metrics clients (slowloris): --connections connections to the metrics port, each sending
a request line and then one header byte per second, never finishing the request.

Bounded: stops after --seconds.

Usage: slow_metrics.py --port PORT [--host 127.0.0.1] [--connections 2] [--seconds 10]
"""
import argparse
import json
import socket
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--connections", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()

    sockets = []
    for _ in range(args.connections):
        sock = socket.create_connection((args.host, args.port), timeout=2)
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        sockets.append(sock)
    start = time.monotonic()
    bytes_sent, dropped = 0, 0
    while time.monotonic() - start < args.seconds and sockets:
        time.sleep(1)
        for sock in list(sockets):
            try:
                sock.sendall(b"a")
                bytes_sent += 1
            except OSError:
                dropped += 1
                sockets.remove(sock)
                sock.close()
    for sock in sockets:
        sock.close()
    print(json.dumps({"probe": "slow_metrics", "connections": args.connections,
                      "trickled_bytes": bytes_sent, "dropped_by_server": dropped,
                      "seconds": round(time.monotonic() - start, 2)}))


if __name__ == "__main__":
    main()
