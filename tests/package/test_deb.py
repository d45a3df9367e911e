"""package_deb: the Debian packages of this build, unpacked and run.

scripts/deb.sh packages this build tree; each .deb is checked (control
fields, conffiles, maintainer scripts) and unpacked with `dpkg -x` into a
scratch root, never into the system. The packaged binaries then run from
there (LD_LIBRARY_PATH to the scratch library dir): `tern --version`,
`ternd --version`, and a one-node ternd from the packaged sample
/etc/tern/ternd.ini (data dir and ports moved to a temp dir on loopback)
started with NOTIFY_SOCKET on a unix datagram socket of the test:
READY=1 must arrive, with the client port already accepting, a
produce/consume round trip through the packaged `tern` must return what
was produced, and SIGTERM must bring STOPPING=1 and exit 0. Last,
`systemd-analyze verify` on the packaged unit (its ExecStart pointed at the
scratch binary), when systemd-analyze is installed.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "integration"))
import tern_harness as h  # noqa: E402

SRC = os.environ.get("TERN_SRC", h.REPO)
BUILD = os.environ.get("TERN_BUILD", os.path.join(SRC, "build"))
PACKAGES = ("libtern0", "libtern-dev", "tern-cli", "ternd")


def run(args, timeout=60, env=None, **kw):
    return subprocess.run(args, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True,
                          timeout=timeout, env=env, **kw)


def project_version():
    with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
        for line in f:
            if line.startswith("CMAKE_PROJECT_VERSION:STATIC="):
                return line.split("=", 1)[1].strip()
    raise RuntimeError("no CMAKE_PROJECT_VERSION in the build's cache")


def control(deb):
    r = run(["dpkg-deb", "-f", deb])
    fields = {}
    for line in r.stdout.splitlines():
        m = re.match(r"^([A-Za-z-]+): (.*)$", line)
        if m:
            fields[m.group(1)] = m.group(2)
    return fields


def recv_notify(sock, want, timeout):
    """Datagrams from sock until one holds the line want (or timeout s).
    Returns (found, [messages])."""
    msgs = []
    deadline = time.monotonic() + timeout
    for _ in range(1000):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            data = sock.recv(4096)
        except socket.timeout:
            break
        msg = data.decode(errors="replace")
        msgs.append(msg)
        if want in msg.split("\n"):
            return True, msgs
    return False, msgs


def test(c):
    if os.environ.get("TERN_SANITIZE"):
        raise h.Skip("packages are made from unsanitized builds")
    for tool in ("dpkg-deb", "dpkg-shlibdeps"):
        if shutil.which(tool) is None:
            raise h.Skip("%s is missing (dpkg-dev)" % tool)
    tmp = h.scratch_dir("tern-pkg-deb.")
    version = project_version()
    arch = run(["dpkg", "--print-architecture"]).stdout.strip()

    c.step("scripts/deb.sh on this build")
    t0 = time.monotonic()
    r = run([os.path.join(SRC, "scripts", "deb.sh"), "--build-dir", BUILD,
             "--out", os.path.join(tmp, "debs")], timeout=90)
    c.check(r.returncode == 0, "deb.sh exits 0", r.stderr[-2000:])
    c.info("packages built in %.1f s" % (time.monotonic() - t0))
    debs = {}
    for line in r.stdout.split():
        name = os.path.basename(line).split("_")[0]
        debs[name] = line
    c.check(sorted(debs) == sorted(PACKAGES), "four packages",
            sorted(debs))
    if sorted(debs) != sorted(PACKAGES):
        return

    c.step("control files")
    deb_version = version + "-1"
    for p in PACKAGES:
        f = control(debs[p])
        c.check(f.get("Package") == p and f.get("Version") == deb_version
                and f.get("Architecture") == arch,
                "%s: Package, Version %s, Architecture %s" %
                (p, deb_version, arch), f)
        c.check(os.path.basename(debs[p]) ==
                "%s_%s_%s.deb" % (p, deb_version, arch),
                "%s: file name" % p, debs[p])
    dep = {p: control(debs[p]).get("Depends", "") for p in PACKAGES}
    c.check("libtern0 (>= %s)" % version in dep["tern-cli"],
            "tern-cli depends on libtern0 (shlibs)", dep["tern-cli"])
    # libraft is linked statically when libraft.a exists (raft/crc.c
    # wraps its checksum), then lz4 (libraft's snapshot compression)
    # is ternd's own dependency instead.
    needed = run(["readelf", "-d", os.path.join(BUILD, "node", "ternd")]).stdout
    raft_dep = "libraft2" if "libraft.so" in needed else "liblz4-1"
    if raft_dep == "liblz4-1":
        c.check(control(debs["ternd"]).get("Built-Using", "").startswith(
            "raft (= "), "ternd names the libraft it links (Built-Using)",
            control(debs["ternd"]))
    c.check(all(x in dep["ternd"] for x in
                ("libc6", raft_dep, "libuv1", "liblmdb0", "libsystemd0",
                 "adduser")),
            "ternd depends on its libraries (dpkg-shlibdeps, %s) and "
            "adduser" % raft_dep, dep["ternd"])
    c.check("libssl3" in dep["libtern0"] and "libxxhash0" in dep["libtern0"],
            "libtern0 depends on libssl3 and libxxhash0", dep["libtern0"])
    c.check("libtern0 (= %s)" % deb_version in dep["libtern-dev"],
            "libtern-dev depends on the same libtern0", dep["libtern-dev"])

    ctl = os.path.join(tmp, "ternd-control")
    r = run(["dpkg-deb", "-e", debs["ternd"], ctl])
    c.check(r.returncode == 0, "ternd control area extracts", r.stderr)
    with open(os.path.join(ctl, "conffiles")) as f:
        c.check(f.read().split() == ["/etc/tern/ternd.ini"],
                "ternd conffiles: /etc/tern/ternd.ini")
    with open(os.path.join(ctl, "postinst")) as f:
        postinst = f.read()
    c.check("adduser --quiet --system" in postinst and
            "install -d -m 0700 -o tern -g tern /var/lib/tern" in postinst,
            "postinst makes the system user tern and /var/lib/tern")
    for script in ("postinst", "prerm", "postrm"):
        path = os.path.join(ctl, script)
        r = run(["sh", "-n", path])
        c.check(r.returncode == 0 and os.access(path, os.X_OK),
                "%s is executable shell" % script, r.stderr)

    c.step("dpkg -x into a scratch root")
    root = os.path.join(tmp, "root")
    for p in PACKAGES:
        r = run(["dpkg-deb", "-x", debs[p], root])
        c.check(r.returncode == 0, "dpkg -x %s" % p, r.stderr)
    ternd = os.path.join(root, "usr", "sbin", "ternd")
    tern = os.path.join(root, "usr", "bin", "tern")
    libs = [os.path.dirname(os.path.join(dp, fn))
            for dp, _, fns in os.walk(os.path.join(root, "usr", "lib"))
            for fn in fns if fn.startswith("libtern.so.")]
    c.check(len(libs) > 0, "libtern.so.* unpacked", libs)
    for path in ("etc/tern/ternd.ini", "lib/systemd/system/ternd.service",
                 "usr/share/man/man8/ternd.8.gz",
                 "usr/share/man/man1/tern.1.gz", "usr/include/tern/tern.h"):
        c.check(os.path.isfile(os.path.join(root, path)),
                "unpacked /%s" % path)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = libs[0] if libs else ""
    env.pop("NOTIFY_SOCKET", None)
    r = run(["ldd", tern], env=env)
    c.check(root in r.stdout, "tern loads the unpacked libtern",
            r.stdout)
    r = run([tern, "--version"], env=env)
    c.check(r.stdout.strip() == "tern %s (libtern %s)" % (version, version),
            "tern --version", r.stdout + r.stderr)
    r = run([ternd, "--version"], env=env)
    c.check(r.stdout.strip() == "ternd %s" % version, "ternd --version",
            r.stdout + r.stderr)

    c.step("one node from the packaged ternd.ini, NOTIFY_SOCKET set")
    cport, rport = h.free_ports(2)
    with open(os.path.join(root, "etc", "tern", "ternd.ini")) as f:
        ini = f.read()
    data = os.path.join(tmp, "data")
    subst = {"data_dir": data, "client_addr": "127.0.0.1:%d" % cport,
             "raft_addr": "127.0.0.1:%d" % rport}
    for key, val in subst.items():
        ini, n = re.subn(r"(?m)^%s\s*=.*$" % key, "%s = %s" % (key, val),
                         ini)
        c.check(n == 1, "sample ini sets %s once" % key)
    conf = os.path.join(tmp, "ternd.ini")
    with open(conf, "w") as f:
        f.write(ini)
    nsock_path = os.path.join(tmp, "notify.sock")
    nsock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    nsock.bind(nsock_path)
    env_d = dict(env)
    env_d["NOTIFY_SOCKET"] = nsock_path
    log = open(os.path.join(tmp, "ternd.log"), "w")
    proc = subprocess.Popen([ternd, "--config", conf], env=env_d,
                            stdout=log, stderr=subprocess.STDOUT)
    h._children.append(proc)
    ready, msgs = recv_notify(nsock, "READY=1", 30)
    seen = list(msgs)
    accepted = False
    if ready:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            try:
                s.connect(("127.0.0.1", cport))
                accepted = True
            except OSError as e:
                c.info("connect after READY=1: %s" % e)
    c.check(ready, "READY=1 arrives on NOTIFY_SOCKET", msgs)
    c.check(accepted, "the client port accepts when READY=1 arrives")
    c.check(any("STATUS=serving clients on 127.0.0.1:%d" % cport in m
                for m in msgs), "STATUS names the client address", msgs)

    c.step("produce/consume through the packaged tern")
    srv = "127.0.0.1:%d" % cport
    r = run([tern, "-s", srv, "queue", "create", "pkg"], env=env)
    c.check(r.returncode == 0, "queue create", r.stderr)
    ids = ["m%d" % i for i in range(1, 6)]
    r = run([tern, "-s", srv, "produce", "pkg"], env=env,
            input="".join("%s.payload\n" % i for i in ids))
    c.check(r.returncode == 0, "produce 5 messages", r.stderr)
    r = run([tern, "-s", srv, "consume", "pkg", "--offset", "0", "--max",
             "5"], env=env)
    got = [pid for _, pid in h.parse_consume(r.stdout)]
    c.check(r.returncode == 0 and got == ids,
            "consume returns the 5 messages in order", (got, r.stderr))

    nsock.settimeout(0)
    for _ in range(100):  # role changes sent while serving
        try:
            seen.append(nsock.recv(4096).decode(errors="replace"))
        except OSError:
            break
    c.step("SIGTERM: STOPPING=1, exit 0")
    proc.send_signal(signal.SIGTERM)
    stopping, msgs = recv_notify(nsock, "STOPPING=1", 20)
    c.check(stopping, "STOPPING=1 arrives on SIGTERM", msgs)
    c.check(any(re.search(r"STATUS=leader, term \d+, writable", m)
                for m in seen + msgs),
            "STATUS reports the raft role (leader, writable)", seen + msgs)
    try:
        rc = proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        rc = None
    c.check(rc == 0, "ternd exits 0", rc)
    nsock.close()
    log.close()
    if rc != 0:
        with open(os.path.join(tmp, "ternd.log")) as f:
            c.info("ternd log tail:\n" + "".join(f.readlines()[-20:]))

    c.step("systemd-analyze verify on the packaged unit")
    if shutil.which("systemd-analyze") is None:
        c.info("systemd-analyze is not installed: unit not verified")
        return
    with open(os.path.join(root, "lib", "systemd", "system",
                           "ternd.service")) as f:
        unit = f.read()
    c.check("ExecStart=/usr/sbin/ternd --config /etc/tern/ternd.ini" in unit
            and "Type=notify" in unit, "unit: Type=notify, ExecStart")
    udir = os.path.join(tmp, "unit")
    os.makedirs(udir)
    upath = os.path.join(udir, "ternd.service")
    with open(upath, "w") as f:
        f.write(unit.replace("ExecStart=/usr/sbin/ternd",
                             "ExecStart=" + ternd))
    env_v = dict(env)
    env_v["MANPATH"] = os.path.join(root, "usr", "share", "man")
    env_v["SYSTEMD_LOG_LEVEL"] = "warning"
    r = run(["systemd-analyze", "verify", "--man=yes", upath], env=env_v)
    problems = [ln for ln in (r.stdout + r.stderr).splitlines()
                if ln.strip()]
    c.check(r.returncode == 0 and not problems,
            "systemd-analyze verify: no complaint", problems)


if __name__ == "__main__":
    h.run_test(test)
