#!/usr/bin/env python3
"""UDP round-trip probe for the delayer test (this VM has no ping).

  udp_rtt.py echo ADDR PORT SECONDS        echo every datagram back (bounded)
  udp_rtt.py probe ADDR PORT COUNT INTERVAL
      sends COUNT datagrams INTERVAL seconds apart without waiting for
      replies (like ping -i), waits up to 2 s for the last replies, prints
      "MIN AVG MAX LOSS MEDIAN" (ms, ms, ms, percent, ms; "none" when
      nothing came back).
"""
import socket
import sys
import threading
import time


def echo(addr, port, seconds):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, port))
    end = time.monotonic() + seconds
    s.settimeout(0.5)
    while time.monotonic() < end:
        try:
            data, peer = s.recvfrom(256)
        except socket.timeout:
            continue
        s.sendto(data, peer)


def probe(addr, port, count, interval):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.2)
    sent = {}
    rtts = {}
    done = threading.Event()

    def receiver():
        while not done.is_set():
            try:
                data = s.recv(256)
            except socket.timeout:
                continue
            seq = int(data)
            if seq in sent and seq not in rtts:
                rtts[seq] = (time.monotonic() - sent[seq]) * 1000.0

    t = threading.Thread(target=receiver, daemon=True)
    t.start()
    for seq in range(count):
        sent[seq] = time.monotonic()
        try:
            s.sendto(str(seq).encode(), (addr, port))
        except OSError:
            pass  # counted as lost (e.g. the namespace is being torn down)
        time.sleep(interval)
    deadline = time.monotonic() + 2.0
    while len(rtts) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    done.set()
    t.join()
    loss = round(100.0 * (count - len(rtts)) / count)
    if not rtts:
        print("none none none", loss, "none")
        return
    v = sorted(rtts.values())
    print("%.2f %.2f %.2f %d %.2f" % (v[0], sum(v) / len(v), v[-1], loss,
                                      v[len(v) // 2]))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "echo":
        echo(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    elif len(sys.argv) == 6 and sys.argv[1] == "probe":
        probe(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
    else:
        sys.exit(__doc__)
