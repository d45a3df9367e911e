"""Raw-socket helpers shared by the test_limits_*.py integration tests:
request encoders for the client protocol (proto/include/proto.h) and
socket helpers that never block longer than asked."""
import os
import socket
import struct
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tern_harness as h  # noqa: E402

ELIMIT = h.CODE["TERN_ELIMIT"]


def fetch(queue, offset, max_msgs, max_bytes, wait_ms, request_id):
    body = (h.put_str(queue) +
            struct.pack("<QIII", offset, max_msgs, max_bytes, wait_ms))
    return h.encode_frame(h.OP["FETCH"], body, request_id=request_id)


def create(queue, request_id):
    return h.encode_frame(h.OP["QUEUE_CREATE"], h.put_str(queue),
                          request_id=request_id)


def status(request_id):
    return h.encode_frame(h.OP["STATUS"], b"", request_id=request_id)


def connect(port, source="127.0.0.1", rcvbuf=None, timeout=5):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((source, 0))
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def send_some(sock, data, seconds):
    """Send as much of data as the peer takes within seconds; returns the
    number of bytes sent (the peer may stop reading)."""
    sent = 0
    deadline = time.monotonic() + seconds
    sock.setblocking(False)
    try:
        while sent < len(data) and time.monotonic() < deadline:
            try:
                sent += sock.send(data[sent:sent + 65536])
            except BlockingIOError:
                time.sleep(0.01)
            except (BrokenPipeError, ConnectionResetError):
                break
    finally:
        sock.setblocking(True)
    return sent


def closed_by_peer(sock, timeout):
    """True if the peer closes within timeout (its bytes are discarded);
    error frames seen on the way are returned as the second value."""
    deadline = time.monotonic() + timeout
    frames = []
    buf = b""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            chunk = sock.recv(1 << 20)
        except socket.timeout:
            return False, frames
        except (ConnectionResetError, BrokenPipeError):
            return True, frames
        if not chunk:
            return True, frames
        buf += chunk
        while len(buf) >= h.HEADER.size:
            blen = h.HEADER.unpack(buf[:h.HEADER.size])[3]
            if len(buf) < h.HEADER.size + blen:
                break
            f = h.Frame(buf[:h.HEADER.size],
                        buf[h.HEADER.size:h.HEADER.size + blen])
            buf = buf[h.HEADER.size + blen:]
            if f.status != 0:
                frames.append(f)
        if len(buf) > (1 << 20):
            buf = b""  # answers we do not look at
    return False, frames


def memory(cl, nid=1):
    return h.proc_memory_kb(cl.nodes[nid].pid)


def server_side_conns(port, peer_ports=None):
    """Established TCP sockets whose local port is port (the node's ends
    of its client connections), from /proc/net/tcp; with peer_ports, only
    those connected to one of them."""
    n = 0
    with open("/proc/net/tcp") as f:
        next(f)
        for ln in f:
            parts = ln.split()
            local, remote, st = parts[1], parts[2], parts[3]
            if st != "01" or int(local.split(":")[1], 16) != port:
                continue
            if peer_ports is None or int(remote.split(":")[1], 16) in \
                    peer_ports:
                n += 1
    return n
