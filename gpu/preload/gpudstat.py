"""What gpud reserves.

    gpudstat.py SOCKET PID      the bytes the leases of PID and its descendants reserve (0: none)
    gpudstat.py SOCKET device   "RESERVED CAPACITY" of device 0"""

import json
import os
import socket
import struct
import sys


def frame(sock, message):
    body = json.dumps(message).encode()
    sock.sendall(struct.pack(">I", len(body)) + body)


def read(sock):
    def exactly(n):
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise EOFError("gpud closed the connection")
            data += chunk
        return data

    (n,) = struct.unpack(">I", exactly(4))
    return json.loads(exactly(n))


def family(pid):
    """pid and its descendants, from /proc."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    # The fields after the parenthesised name: state, ppid, ...
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found = {pid}
    grew = True
    while grew:
        grew = False
        for child, parent in parents.items():
            if parent in found and child not in found:
                found.add(child)
                grew = True
    return found


def main() -> int:
    path, what = sys.argv[1], sys.argv[2]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)
        frame(s, {"type": "hello", "version": 1, "client": "gpudstat"})
        read(s)
        frame(s, {"type": "request", "id": 1, "op": "status"})
        while True:
            m = read(s)
            if m.get("type") == "reply":
                break
        status = m["outcome"]["ok"]["status"]
        if what == "device":
            d = status["devices"][0]
            print(d["reserved_bytes"], d["capacity_bytes"])
            return 0
        leases = status["leases"]
        pids = family(int(what))
        print(sum(l["vram_bytes"] for l in leases if l["pid"] in pids))
    return 0


if __name__ == "__main__":
    sys.exit(main())
