"""A tiny TCP throughput probe for tests/tools/test_netsim.py.

``python throughput.py recv ADDRESS PORT``: accept one connection, read until it closes, print one JSON line
``{"bytes": N, "seconds": S, "mbit_per_s": R}`` (from the first byte to the last).
``python throughput.py send ADDRESS PORT SECONDS``: connect (retrying for 5 s) and send for SECONDS.
"""

import json
import socket
import sys
import time


def receive(address: str, port: int) -> None:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((address, port))
    server.listen(1)
    print("ready", flush=True)
    conn, _ = server.accept()
    total, first, last = 0, None, None
    while chunk := conn.recv(1 << 20):
        now = time.perf_counter()
        first = now if first is None else first
        total, last = total + len(chunk), now
    seconds = (last - first) if first is not None and last is not None else 0.0
    print(json.dumps({"bytes": total, "seconds": seconds, "mbit_per_s": total * 8 / seconds / 1e6 if seconds else 0}),
          flush=True)


def send(address: str, port: int, seconds: float) -> None:
    deadline = time.monotonic() + 5
    while True:
        try:
            conn = socket.create_connection((address, port))
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    block, end = b"x" * (1 << 16), time.perf_counter() + seconds
    while time.perf_counter() < end:
        conn.sendall(block)
    conn.close()


if __name__ == "__main__":
    if sys.argv[1] == "recv":
        receive(sys.argv[2], int(sys.argv[3]))
    else:
        send(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
