#!/usr/bin/env bash
# tests/rxe/guest-build.sh: builds the soft-RoCE test guest that
# tests/rxe/guest-run.sh boots in QEMU: Debian's stock amd64 kernel (fetched
# as a .deb and unpacked into the cache, never installed on this host) and an
# initramfs assembled from this host's Debian packages.
#
# Usage: tests/rxe/guest-build.sh [-f]
#   -f  rebuild the initramfs even when the cache says it is up to date
#
# Steps, each skipped when its result is already in the cache:
#   1. host packages: installs the missing ones of HOST_PACKAGES below
#      (apt-get, needs root; waits up to 10 min for another apt's lock);
#   2. kernel: the linux-image-<version>-amd64 package that Debian's
#      linux-image-amd64 depends on (resolved once and remembered), fetched
#      with `apt-get download`, unpacked into a scratch tree, `depmod -b`;
#   3. vmlinux: the uncompressed ELF image cut out of the xz-compressed
#      bzImage, so that QEMU boots it directly through its PVH entry point
#      (saves the in-guest decompression, seconds under TCG);
#   4. initramfs: busybox (fallback applets, /init's shell), the kernel
#      modules of GUEST_MODULES with their dependency closure (load order
#      from `modprobe --show-depends`), and the executables of
#      GUEST_TOOL_PACKAGES (bash, GNU coreutils/grep/sed/awk/cmp, iproute2's
#      ip/rdma/tc/bridge/ss, rdma-core's ibverbs-utils and rdmacm-utils,
#      perftest, the openssl tool and its openssl.cnf for
#      scripts/tern-certs.sh) with their `ldd` closure, plus rdma-core's rxe
#      provider and libgcc_s (dlopen'ed, so ldd does not list them);
#      tests/rxe/guest-init.sh becomes /init. The tern binaries themselves
#      are not in the guest: tests/rxe/run.sh stages them with their own
#      `ldd` closure (libssl, libcrypto, ...) in the 9p work dir.
# The initramfs is rebuilt when this script, guest-init.sh, the kernel or the
# version of a package it copies from changes (a hash kept in the cache).
# Holds an exclusive lock on the cache while it works: concurrent callers
# wait and then find the guest built.
#
# Env: TERN_RXE_CACHE   the cache directory (default
#                       ${XDG_CACHE_HOME:-$HOME/.cache}/tern-rxe, or
#                       /var/tmp/tern-rxe-UID without a writable home; it
#                       survives between runs, outside the source tree)
#      TERN_RXE_KERNEL_PKG      pin a kernel package (linux-image-...-amd64)
#      TERN_RXE_KERNEL_REFRESH=1  resolve linux-image-amd64's dependency again
#      TERN_RXE_GUEST_EXTRA     more host files for the guest (executables go
#                               to /usr/bin or /usr/sbin, libraries keep their
#                               path; ldd closure included)
# Output: on success, the path of CACHE/guest.env on stdout (progress goes to
# stderr). guest.env holds shell assignments read by guest-run.sh:
#   GUEST_KVER=<kernel release>
#   GUEST_KERNEL=<vmlinux, or the bzImage when no vmlinux could be cut out>
#   GUEST_INITRD=<initramfs.cpio.gz>
# Exit: 0 ready; 77 the guest cannot be built here (packages missing and not
# root, apt failed, kernel not downloadable, kernel without rdma_rxe, not an
# amd64 host); 1 any other error.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)

# Host packages: what the build itself runs, QEMU for guest-run.sh, and the
# packages whose files are copied into the guest.
HOST_PACKAGES="kmod cpio xz-utils qemu-system-x86 qemu-system-data busybox-static
    bash coreutils grep sed mawk diffutils iproute2 ibverbs-utils rdmacm-utils
    perftest ibverbs-providers libgcc-s1 openssl"
# Packages whose executables all go into the guest.
GUEST_TOOL_PACKAGES="bash coreutils grep sed mawk diffutils iproute2
    ibverbs-utils rdmacm-utils perftest openssl"
# Kernel modules loaded at boot (their dependencies are added): soft-RoCE
# and the rdma_cm user interface, the test topology (veth, bridge, netem),
# the 9p shares over virtio, and the crc32 that rxe's ICRC asks the crypto
# API for (loaded up front: the guest has no kmod to autoload it).
GUEST_MODULES="rdma_rxe rdma_ucm ib_uverbs veth bridge sch_netem
    9p 9pnet_virtio virtio_pci crc32_generic crc32_pclmul"
MULTIARCH=x86_64-linux-gnu

log() { echo "guest-build: $*" >&2; }
cannot() { log "cannot build the guest here: $*"; exit 77; }

FORCE=0
while getopts "f" o; do
    case $o in
    f) FORCE=1 ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
    esac
done

[ "$(dpkg --print-architecture 2>/dev/null)" = amd64 ] ||
    cannot "the guest is amd64 and needs an amd64 Debian host"

default_cache() { # the user's cache dir, else one in /var/tmp
    local base=${XDG_CACHE_HOME:-${HOME:+$HOME/.cache}}
    if [ -n "$base" ] && mkdir -p "$base" 2>/dev/null && [ -w "$base" ]; then
        echo "$base/tern-rxe"
    else
        echo "/var/tmp/tern-rxe-$(id -u)"
    fi
}
CACHE=${TERN_RXE_CACHE:-$(default_cache)}
mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)
exec 9>"$CACHE/lock"
flock -w 1800 9 || { log "timed out waiting for the lock on $CACHE"; exit 1; }

apt_get() { # apt-get ARGS...: non-interactive, waits for another apt's lock
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@"
}

# ---- 1. host packages ---------------------------------------------------------
# shellcheck disable=SC2086
missing=$({ dpkg-query -W -f='${Package} ${db:Status-Status}\n' $HOST_PACKAGES 2>/dev/null || true; } |
    awk '$2 == "installed" { ok[$1] = 1 } END { for (p in ok) print p }' |
    sort | comm -13 - <(printf '%s\n' $HOST_PACKAGES | sort) | tr '\n' ' ')
if [ -n "$missing" ]; then
    [ "$(id -u)" = 0 ] || cannot "missing packages: $missing(run as root, or scripts/install-deps.sh)"
    log "installing $missing"
    # shellcheck disable=SC2086
    apt_get install -y -q --no-install-recommends $missing >&2 ||
        { apt_get update -q >&2 &&
            apt_get install -y -q --no-install-recommends $missing >&2; } ||
        cannot "apt-get install $missing failed"
fi

# ---- 2. kernel ----------------------------------------------------------------
resolve_kernel() { # prints linux-image-<version>-amd64
    apt-cache depends linux-image-amd64 2>/dev/null |
        awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }'
}
KPKG=${TERN_RXE_KERNEL_PKG:-}
if [ -z "$KPKG" ] && [ "${TERN_RXE_KERNEL_REFRESH:-0}" != 1 ] && [ -s "$CACHE/kernel.pkg" ]; then
    KPKG=$(cat "$CACHE/kernel.pkg")
fi
if [ -z "$KPKG" ]; then
    KPKG=$(resolve_kernel)
    if [ -z "$KPKG" ] && [ "$(id -u)" = 0 ]; then
        apt_get update -q >&2 || true
        KPKG=$(resolve_kernel)
    fi
    [ -n "$KPKG" ] || cannot "apt-cache knows no linux-image-amd64 (apt-get update?)"
fi
echo "$KPKG" >"$CACHE/kernel.pkg"
KVER=${KPKG#linux-image-}
KDIR=$CACHE/kernel-$KVER # vmlinuz, config, vmlinux
mkdir -p "$CACHE/debs" "$KDIR"

kernel_deb() { # prints the cached .deb of $KPKG, fetching it when absent
    local deb
    deb=$(find "$CACHE/debs" -maxdepth 1 -name "${KPKG}_*.deb" | head -n 1)
    if [ -z "$deb" ]; then
        log "fetching $KPKG"
        # The sandbox user cannot write into a root-owned cache: not needed here.
        (cd "$CACHE/debs" && apt-get -q -o APT::Sandbox::User=root download "$KPKG" >&2) ||
            { [ "$(id -u)" = 0 ] && apt_get update -q >&2 &&
                (cd "$CACHE/debs" && apt-get -q -o APT::Sandbox::User=root download "$KPKG" >&2); } ||
            cannot "apt-get download $KPKG failed"
        deb=$(find "$CACHE/debs" -maxdepth 1 -name "${KPKG}_*.deb" | head -n 1)
        [ -n "$deb" ] || cannot "apt-get download $KPKG left no .deb"
        find "$CACHE/debs" -maxdepth 1 -name '*.deb' ! -name "${KPKG}_*" -delete
    fi
    echo "$deb"
}

# The unpacked package (about 400 MB) lives only while this script runs.
KTREE=$CACHE/ktree
rm -rf "$KTREE"
trap 'rm -rf "$KTREE" "$CACHE/rootfs" "$CACHE"/*.tmp' EXIT
MODROOT="" # the -b base for depmod/modprobe: KTREE, or KTREE/usr
unpack_kernel() {
    [ -z "$MODROOT" ] || return 0
    local deb
    deb=$(kernel_deb) || exit $?
    log "unpacking $(basename "$deb")"
    mkdir -p "$KTREE"
    dpkg-deb -x "$deb" "$KTREE"
    if [ -d "$KTREE/lib/modules/$KVER" ]; then
        MODROOT=$KTREE
    elif [ -d "$KTREE/usr/lib/modules/$KVER" ]; then
        MODROOT=$KTREE/usr
    else
        log "$deb has no lib/modules/$KVER"
        exit 1
    fi
    depmod -b "$MODROOT" "$KVER"
    cp "$KTREE/boot/vmlinuz-$KVER" "$KDIR/vmlinuz.tmp"
    cp "$KTREE/boot/config-$KVER" "$KDIR/config"
    mv "$KDIR/vmlinuz.tmp" "$KDIR/vmlinuz"
}
if [ ! -s "$KDIR/vmlinuz" ] || [ ! -s "$KDIR/config" ]; then
    unpack_kernel
fi
grep -Eq '^CONFIG_RDMA_RXE=(m|y)' "$KDIR/config" ||
    cannot "$KPKG is built without CONFIG_RDMA_RXE"

# ---- 3. vmlinux -----------------------------------------------------------------
is_elf() { [ "$(head -c 4 "$1" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]; }
# The bzImage carries the kernel as one xz stream: try each xz magic
# (fd 37 7a 58 5a 00) until one decompresses to an ELF file.
cut_vmlinux() {
    local off
    grep -q '^CONFIG_PVH=y' "$KDIR/config" || return 0
    for off in $(LC_ALL=C grep -obUa $'\xfd7zXZ' "$KDIR/vmlinuz" | cut -d: -f1 | head -n 8); do
        # xz stops at the end of its stream; tail then dies of SIGPIPE.
        tail -c "+$((off + 1))" "$KDIR/vmlinuz" 2>/dev/null |
            xz -dc --single-stream >"$KDIR/vmlinux.tmp" 2>/dev/null || true
        if is_elf "$KDIR/vmlinux.tmp"; then
            mv "$KDIR/vmlinux.tmp" "$KDIR/vmlinux"
            return 0
        fi
    done
    rm -f "$KDIR/vmlinux.tmp"
    log "no vmlinux in the bzImage: the guest boots the bzImage (slower)"
}
if [ ! -s "$KDIR/vmlinux" ]; then
    cut_vmlinux
fi
KERNEL=$KDIR/vmlinuz
if [ -s "$KDIR/vmlinux" ]; then
    KERNEL=$KDIR/vmlinux
fi

# ---- 4. initramfs ---------------------------------------------------------------
INITRD=$CACHE/initramfs-$KVER.cpio.gz
# shellcheck disable=SC2086
stamp=$({
    cat "$0" "$HERE/guest-init.sh"
    echo "$KPKG ${TERN_RXE_GUEST_EXTRA:-}"
    dpkg-query -W -f='${Package} ${Version}\n' $HOST_PACKAGES
} | sha256sum | cut -c1-16)

write_env() {
    cat >"$CACHE/guest.env.tmp" <<EOF
GUEST_KVER=$KVER
GUEST_KERNEL=$KERNEL
GUEST_INITRD=$INITRD
EOF
    mv "$CACHE/guest.env.tmp" "$CACHE/guest.env"
    echo "$CACHE/guest.env"
}
if [ "$FORCE" = 0 ] && [ -s "$INITRD" ] && [ "$(cat "$CACHE/initramfs.stamp" 2>/dev/null)" = "$stamp" ]; then
    write_env
    exit 0
fi

t0=$SECONDS
unpack_kernel
R=$CACHE/rootfs
rm -rf "$R"
mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,usr/lib/"$MULTIARCH",usr/lib64,etc/tern-guest} \
    "$R"/{proc,sys,dev,tmp,run,root,var/tmp,mnt/work,mnt/run}
# Merged /usr for libraries (so both /lib/... and /usr/lib/... names from ldd
# resolve); /bin stays busybox's, behind /usr/bin and /usr/sbin in PATH.
ln -s usr/lib "$R/lib"
ln -s usr/lib64 "$R/lib64"

cp /bin/busybox "$R/bin/busybox"
for a in $(/bin/busybox --list); do
    [ "$a" = busybox ] || ln -s busybox "$R/bin/$a"
done

# Kernel modules, in load order.
: >"$R/etc/tern-guest/modules"
for m in $GUEST_MODULES; do
    modprobe -d "$MODROOT" -S "$KVER" --show-depends "$m" ||
        { log "module $m not found in $KPKG"; exit 1; }
done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }' | while read -r ko; do
    rel=${ko#"$MODROOT/lib/modules/$KVER/"}
    mkdir -p "$R/lib/modules/$KVER/$(dirname "$rel")"
    cp "$ko" "$R/lib/modules/$KVER/$rel"
    echo "$rel" >>"$R/etc/tern-guest/modules"
done
cp "$MODROOT/lib/modules/$KVER"/modules.{order,builtin,builtin.modinfo} "$R/lib/modules/$KVER/"
depmod -b "$R" "$KVER"

# Executables go to /usr/sbin or /usr/bin by their host directory (so PATH
# finds them before busybox's /bin); libraries keep their host path (the
# guest's /lib and /lib64 lead into /usr); then the ldd closure of all of
# them, each library copied once.
exes=() libs=()
# shellcheck disable=SC2086
for f in $(dpkg -L $GUEST_TOOL_PACKAGES | grep -E '^(/usr)?/s?bin/[^/]+$'); do
    if [ -f "$f" ] && [ -x "$f" ]; then exes+=("$f"); fi
done
libs+=(/usr/lib/"$MULTIARCH"/libibverbs/librxe-*.so /usr/lib/"$MULTIARCH"/libgcc_s.so.1)
for f in ${TERN_RXE_GUEST_EXTRA:-}; do
    case $f in
    *.so | *.so.*) libs+=("$f") ;;
    *) exes+=("$f") ;;
    esac
done
for f in "${exes[@]}"; do
    [ -e "$f" ] || { log "$f missing"; exit 1; }
    to=usr/bin
    case ${f%/*} in */sbin) to=usr/sbin ;; esac
    [ -e "$R/$to/${f##*/}" ] || cp -L "$f" "$R/$to/"
done
ln -sf mawk "$R/usr/bin/awk"
{
    printf '%s\n' "${libs[@]}"
    # ldd fails when one of them is a script or static: not an error here.
    { ldd "${exes[@]}" "${libs[@]}" 2>/dev/null || true; } |
        awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $2 ~ /^\(0x/ { print $1 }'
} | sort -u | while read -r l; do
    [ -e "$l" ] || { log "$l missing"; exit 1; }
    mkdir -p "$R${l%/*}"
    cp -L "$l" "$R${l%/*}/"
done
mkdir -p "$R/etc/libibverbs.d"
cp /etc/libibverbs.d/rxe.driver "$R/etc/libibverbs.d/"
# iproute2's tables and tc's netem distributions.
for d in /etc/iproute2 /usr/share/iproute2 /usr/lib/tc; do
    if [ -d "$d" ]; then
        mkdir -p "$R$d"
        cp -r "$d/." "$R$d/"
    fi
done
# The openssl tool's configuration (its default path leads to /etc/ssl).
mkdir -p "$R/etc/ssl" "$R/usr/lib/ssl"
cp /etc/ssl/openssl.cnf "$R/etc/ssl/"
ln -sf /etc/ssl/openssl.cnf "$R/usr/lib/ssl/openssl.cnf"
echo "root:x:0:0:root:/root:/bin/bash" >"$R/etc/passwd"
echo "root:x:0:" >"$R/etc/group"
echo "127.0.0.1 localhost" >"$R/etc/hosts"
echo "hosts: files" >"$R/etc/nsswitch.conf"
echo "$KVER" >"$R/etc/tern-guest/kver"
cp "$HERE/guest-init.sh" "$R/init"
chmod 755 "$R/init"

(cd "$R" && find . -print0 | LC_ALL=C sort -z |
    cpio --null -o -H newc -R 0:0 --quiet | gzip -1) >"$INITRD.tmp"
mv "$INITRD.tmp" "$INITRD"
echo "$stamp" >"$CACHE/initramfs.stamp"
find "$CACHE" -maxdepth 1 -name 'initramfs-*.cpio.gz' ! -name "$(basename "$INITRD")" -delete
log "built $INITRD ($(du -h "$INITRD" | cut -f1), $(wc -l <"$R/etc/tern-guest/modules") modules) in $((SECONDS - t0)) s"
write_env
