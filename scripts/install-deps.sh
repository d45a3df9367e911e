#!/usr/bin/env bash
# Installs the Debian 12 packages tern needs to build, test and run, and only
# those that are missing (checked with dpkg-query). Idempotent: when
# everything is present it changes nothing and does not touch the network.
# Runs apt-get update at most once, and only when something must be
# installed. Needs root for that case (uses sudo when it is available).
set -euo pipefail

packages=(
    build-essential cmake pkg-config
    clang libclang-rt-14-dev      # clang + libFuzzer/ASan runtimes (fuzz stage)
    clang-format clang-tidy       # make format / make tidy
    libraft-dev libuv1-dev liblmdb-dev libibverbs-dev librdmacm-dev
    libcriterion-dev libxxhash-dev libinih-dev
    libisal-dev                   # raft/: raft_uv's batch checksum (ISA-L CRC)
    libssl-dev openssl            # auth/: TLS, HMAC, SCRAM; test certificates
    libmicrohttpd-dev             # node/: metrics and health endpoint
    libsystemd-dev                # node/: sd_notify readiness, journald
    dpkg-dev fakeroot             # make deb: Debian packages
    python3                       # integration tests, scripts
    iproute2 procps               # ss/ip, ps/pgrep for scripts
    nftables                      # jepsen/: partitions inside namespaces
    iptables libnetfilter-queue-dev   # jepsen/delayer: NFQUEUE delay nemesis
    faketime libfaketime          # jepsen/: clock skew nemesis
    # tests/rxe/: the soft-RoCE guest (guest-build.sh copies these into it;
    # it installs them itself when run as root)
    qemu-system-x86 qemu-system-data busybox-static kmod cpio xz-utils
    ibverbs-utils rdmacm-utils perftest ibverbs-providers
)

missing=()
for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    if [ "$status" != "installed" ]; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#packages[@]} packages present"
    exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        sudo=(sudo)
    else
        echo "install-deps: need root to install: ${missing[*]}" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
