#!/usr/bin/env bash
# Builds the Debian packages of tern with dpkg-deb (no debhelper):
#
#   ternd        /usr/sbin/ternd, the systemd unit, /etc/tern/ternd.ini
#                (conffile), ternd(8); postinst makes the system user tern
#                and /var/lib/tern
#   tern-cli     /usr/bin/tern, tern(1)
#   libtern0     the shared library (SONAME libtern.so.0)
#   libtern-dev  headers, libtern.a, the libtern.so link, tern.pc, the
#                CMake package
#
#   scripts/deb.sh [--build-dir DIR] [--out DIR]
#
# Without --build-dir: configures and builds a Release tree in
# build-deb/build (prefix /usr, no tests). With --build-dir: packages that
# already-built tree as it is (the package tests do, to stay fast).
# Packaging sources are in dist/ (control templates, maintainer scripts,
# unit, sample configuration). Versions come from the CMake project
# version, Depends from dpkg-shlibdeps, Architecture from dpkg. Output:
# OUT/*.deb (default build-deb/), one line per package on stdout.
set -euo pipefail

cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
OUT=$ROOT/build-deb
BUILD=
while [ $# -gt 0 ]; do
    case "$1" in
    --build-dir)
        BUILD=$(cd "$2" && pwd)
        shift 2
        ;;
    --out)
        mkdir -p "$2"
        OUT=$(cd "$2" && pwd)
        shift 2
        ;;
    *)
        echo "usage: $0 [--build-dir DIR] [--out DIR]" >&2
        exit 2
        ;;
    esac
done
for tool in dpkg-deb dpkg-shlibdeps dpkg-architecture; do
    command -v "$tool" >/dev/null || {
        echo "deb: $tool is missing (dpkg-dev): run scripts/install-deps.sh" >&2
        exit 1
    }
done
unset MAKEFLAGS MFLAGS MAKELEVEL
mkdir -p "$OUT"

if [ -z "$BUILD" ]; then
    BUILD=$OUT/build
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_INSTALL_PREFIX=/usr -DTERN_TESTS=OFF >"$OUT/configure.log"
    cmake --build "$BUILD" -j"${JOBS:-2}" --target ternd tern_cli libtern \
        libtern_static >"$OUT/build.log"
fi

VERSION_UPSTREAM=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$BUILD/CMakeCache.txt")
[ -n "$VERSION_UPSTREAM" ] || {
    echo "deb: no project version in $BUILD/CMakeCache.txt" >&2
    exit 1
}
VERSION=$VERSION_UPSTREAM-1
ARCH=$(dpkg --print-architecture)
LIBDIR=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$BUILD/CMakeCache.txt")
LIBDIR=${LIBDIR:-lib}
SOMAJOR=${VERSION_UPSTREAM%%.*}

WORK=$OUT/work
rm -rf "$WORK"
mkdir -p "$WORK"
STAGE=$WORK/stage
DESTDIR=$STAGE cmake --install "$BUILD" --prefix /usr --strip >/dev/null

# pkg PATH...: move PATHs (relative to the stage) into package dir $P.
P=
take() {
    local f
    for f in "$@"; do
        [ -e "$STAGE/$f" ] || [ -L "$STAGE/$f" ] || {
            echo "deb: $f was not installed" >&2
            exit 1
        }
        mkdir -p "$WORK/$P/$(dirname "$f")"
        mv "$STAGE/$f" "$WORK/$P/$f"
    done
}
man_gz() { # page section
    mkdir -p "$WORK/$P/usr/share/man/man$2"
    gzip -9n <"$STAGE/usr/share/man/man$2/$1.$2" \
        >"$WORK/$P/usr/share/man/man$2/$1.$2.gz"
}
doc() {
    mkdir -p "$WORK/$P/usr/share/doc/$P"
    cp "$ROOT/README.md" "$WORK/$P/usr/share/doc/$P/README.md"
}

P=libtern0
take "usr/$LIBDIR/libtern.so.$SOMAJOR" "usr/$LIBDIR/libtern.so.$VERSION_UPSTREAM"
doc
P=libtern-dev
take "usr/$LIBDIR/libtern.so" "usr/$LIBDIR/libtern.a" \
    "usr/$LIBDIR/pkgconfig/tern.pc" "usr/$LIBDIR/cmake/tern" usr/include/tern
doc
P=tern-cli
take usr/bin/tern
man_gz tern 1
doc
P=ternd
take usr/sbin/ternd
man_gz ternd 8
doc
install -D -m 0644 "$ROOT/dist/systemd/ternd.service" \
    "$WORK/ternd/lib/systemd/system/ternd.service"
install -D -m 0640 "$ROOT/dist/ternd.ini" "$WORK/ternd/etc/tern/ternd.ini"

# Control files. libtern0's shlibs file lets dpkg-shlibdeps map
# libtern.so.0 of tern-cli to it.
for P in libtern0 libtern-dev tern-cli ternd; do
    mkdir -p "$WORK/$P/DEBIAN"
    for f in conffiles triggers postinst prerm postrm; do
        if [ -f "$ROOT/dist/debian/$P/$f" ]; then
            cp "$ROOT/dist/debian/$P/$f" "$WORK/$P/DEBIAN/$f"
            chmod "$([ -x "$ROOT/dist/debian/$P/$f" ] && echo 0755 || echo 0644)" \
                "$WORK/$P/DEBIAN/$f"
        fi
    done
done
echo "libtern $SOMAJOR libtern0 (>= $VERSION_UPSTREAM)" >"$WORK/libtern0/DEBIAN/shlibs"

# dpkg-shlibdeps wants a source tree with debian/control; a minimal one.
SRC=$WORK/src
mkdir -p "$SRC/debian"
printf 'Source: tern\n\nPackage: tern\nArchitecture: any\n' >"$SRC/debian/control"
shlibdeps() { # package elf...
    local p=$1
    shift
    (cd "$SRC" && dpkg-shlibdeps -O -S"$WORK/libtern0" "$@" 2>"$WORK/$p.shlibdeps.log") |
        sed -n 's/^shlibs:Depends=//p'
}

for P in libtern0 libtern-dev tern-cli ternd; do
    case $P in
    libtern0) deps=$(shlibdeps $P "$WORK/libtern0/usr/$LIBDIR/libtern.so.$VERSION_UPSTREAM") ;;
    tern-cli) deps=$(shlibdeps $P "$WORK/tern-cli/usr/bin/tern") ;;
    ternd) deps=$(shlibdeps $P "$WORK/ternd/usr/sbin/ternd") ;;
    *) deps= ;;
    esac
    if [ "$P" != libtern-dev ] && [ -z "$deps" ]; then
        echo "deb: dpkg-shlibdeps found no dependencies for $P:" >&2
        cat "$WORK/$P.shlibdeps.log" >&2
        exit 1
    fi
    size=$(du -sk --exclude=DEBIAN "$WORK/$P" | cut -f1)
    sed -e "s/@VERSION@/$VERSION/g" -e "s/@ARCH@/$ARCH/g" \
        -e "s/@SIZE@/$size/g" -e "s/@DEPENDS@/$deps/g" \
        "$ROOT/dist/debian/$P/control.in" >"$WORK/$P/DEBIAN/control"
    # ternd links libraft statically when libraft.a exists (raft/crc.c):
    # name the source it was built from (Debian's Built-Using).
    if [ "$P" = ternd ] && ! readelf -d "$WORK/ternd/usr/sbin/ternd" | grep -q 'libraft\.so'; then
        built=$(dpkg-query -W -f='${source:Package} (= ${source:Version})' libraft-dev)
        sed -i "/^Depends:/a Built-Using: $built" "$WORK/$P/DEBIAN/control"
    fi
    (cd "$WORK/$P" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' |
        sort -z | xargs -0 -r md5sum >DEBIAN/md5sums)
    deb=$OUT/${P}_${VERSION}_$ARCH.deb
    rm -f "$deb"
    dpkg-deb --root-owner-group -Zxz --build "$WORK/$P" "$deb" >/dev/null
    echo "$deb"
done
# Everything installed went into a package (the man pages as .gz).
left=$(find "$STAGE" \( -type f -o -type l \) ! -name '*.[18]' -printf '%P\n')
if [ -n "$left" ]; then
    echo "deb: installed but in no package:" >&2
    echo "$left" >&2
    exit 1
fi
