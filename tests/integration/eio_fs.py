"""A one-file read-only file system over /dev/fuse (the kernel's FUSE
protocol spoken directly, stdlib only) whose reads fail with EIO in chosen
byte ranges: an unreadable sector, for tests, on machines without
device-mapper. The file's bytes are a copy held in memory.

    fs = EioFile(mnt, "seg", data, bad=[(4096, 8192)])
    ...  # mnt/seg reads as data, but any read touching [4096, 8192) fails
    fs.close()

Root only (mount(2) of type fuse). Requests handled: INIT, LOOKUP,
GETATTR, OPEN, READ, FLUSH, RELEASE, OPENDIR, READDIR, RELEASEDIR,
ACCESS, STATFS, DESTROY; FORGET and BATCH_FORGET need no answer; anything
else is answered EROFS (writes) or ENOSYS (xattrs, links, ...)."""
import ctypes
import errno
import os
import stat
import struct
import threading

FUSE_LOOKUP, FUSE_FORGET, FUSE_GETATTR = 1, 2, 3
FUSE_OPEN, FUSE_READ, FUSE_STATFS, FUSE_RELEASE = 14, 15, 17, 18
FUSE_FLUSH, FUSE_INIT, FUSE_OPENDIR, FUSE_READDIR = 25, 26, 27, 28
FUSE_RELEASEDIR, FUSE_ACCESS, FUSE_INTERRUPT = 29, 34, 36
FUSE_DESTROY, FUSE_BATCH_FORGET = 38, 42
NO_REPLY = (FUSE_FORGET, FUSE_BATCH_FORGET, FUSE_INTERRUPT)
WRITES = (4, 6, 8, 9, 10, 11, 12, 13, 16, 21, 35)  # setattr .. create

IN_HEADER = struct.Struct("<IIQQIIII")  # len opcode unique nodeid uid ...
OUT_HEADER = struct.Struct("<IiQ")  # len error unique
ATTR = struct.Struct("<QQQQQQIIIIIIIIII")  # struct fuse_attr, 88 bytes
ROOT, FILE = 1, 2
MAX_WRITE = 128 << 10


class EioFile:
    def __init__(self, mnt, name, data, bad):
        self.mnt = mnt
        self.name = name.encode()
        self.data = bytes(data)
        self.bad = list(bad)
        self.reads_failed = 0
        self.fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
        libc = ctypes.CDLL(None, use_errno=True)
        self._libc = libc
        opts = ("fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other" %
                self.fd).encode()
        if libc.mount(b"tern-eio", mnt.encode(), b"fuse", 0x6, opts) != 0:
            e = ctypes.get_errno()
            os.close(self.fd)
            raise OSError(e, "mount fuse on %s: %s" % (mnt, os.strerror(e)))
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    # ---- answers ------------------------------------------------------------
    def _attr(self, node):
        if node == ROOT:
            mode, size, nlink = stat.S_IFDIR | 0o755, 0, 2
        else:
            mode, size, nlink = stat.S_IFREG | 0o600, len(self.data), 1
        return ATTR.pack(node, size, (size + 511) // 512, 0, 0, 0, 0, 0, 0,
                         mode, nlink, 0, 0, 0, 4096, 0)

    def _reply(self, unique, err=0, body=b""):
        out = OUT_HEADER.pack(OUT_HEADER.size + len(body), -err, unique)
        try:
            os.write(self.fd, out + body)
        except OSError:
            pass  # the request was interrupted or the mount is gone

    def _read(self, off, size):
        end = min(off + size, len(self.data))
        for b0, b1 in self.bad:
            if off < b1 and end > b0:
                self.reads_failed += 1
                return errno.EIO, b""
        return 0, self.data[off:end] if off < end else b""

    def _dirents(self, off, size):
        """Whole entries from off that fit in size bytes."""
        ents = [(ROOT, b".", 4), (ROOT, b"..", 4), (FILE, self.name, 8)]
        out = b""
        for i, (ino, nm, typ) in enumerate(ents):
            if i < off:
                continue
            ent = struct.pack("<QQII", ino, i + 1, len(nm), typ) + nm
            ent += b"\0" * (-len(ent) % 8)
            if len(out) + len(ent) > size:
                break
            out += ent
        return out

    def _handle(self, op, unique, node, body):
        if op in NO_REPLY:
            return
        if op == FUSE_INIT:
            major, minor, readahead, _flags = struct.unpack_from("<IIII", body)
            self._reply(unique, 0, struct.pack(
                "<IIIIHHIIHHI28x", 7, min(minor, 31), readahead, 0, 16, 12,
                MAX_WRITE, 1, 0, 0, 0))
        elif op == FUSE_LOOKUP:
            nm = body.split(b"\0", 1)[0]
            if node != ROOT or nm != self.name:
                self._reply(unique, errno.ENOENT)
            else:
                self._reply(unique, 0, struct.pack("<QQQQII", FILE, 0, 3600,
                                                   3600, 0, 0)
                            + self._attr(FILE))
        elif op == FUSE_GETATTR:
            self._reply(unique, 0, struct.pack("<QII", 3600, 0, 0) +
                        self._attr(node))
        elif op in (FUSE_OPEN, FUSE_OPENDIR):
            self._reply(unique, 0, struct.pack("<QII", 1, 0, 0))
        elif op == FUSE_READ:
            _fh, off, size = struct.unpack_from("<QQI", body)
            err, data = self._read(off, size)
            self._reply(unique, err, data)
        elif op == FUSE_READDIR:
            _fh, off, size = struct.unpack_from("<QQI", body)
            self._reply(unique, 0, self._dirents(off, size))
        elif op in (FUSE_FLUSH, FUSE_RELEASE, FUSE_RELEASEDIR, FUSE_ACCESS,
                    FUSE_DESTROY):
            self._reply(unique)
        elif op == FUSE_STATFS:
            self._reply(unique, 0, struct.pack("<QQQQQIIII24x", 0, 0, 0, 0,
                                               0, 4096, 255, 4096, 0))
        elif op in WRITES:
            self._reply(unique, errno.EROFS)
        else:
            self._reply(unique, errno.ENOSYS)

    def _serve(self):
        while True:
            try:
                req = os.read(self.fd, MAX_WRITE + 4096)
            except OSError as e:
                if e.errno in (errno.EINTR, errno.EAGAIN, errno.ENOENT):
                    continue
                return  # ENODEV: unmounted
            if len(req) < IN_HEADER.size:
                continue
            _ln, op, unique, node = IN_HEADER.unpack_from(req)[:4]
            try:
                self._handle(op, unique, node, req[IN_HEADER.size:])
            except (struct.error, ValueError):
                # A request shorter than its opcode's struct: answered,
                # so that the caller does not wait forever.
                if op not in NO_REPLY:
                    self._reply(unique, errno.EIO)

    def close(self):
        self._libc.umount2(self.mnt.encode(), 2)  # MNT_DETACH
        try:
            os.close(self.fd)
        except OSError:
            pass
        self.thread.join(5)
