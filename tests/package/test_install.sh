#!/usr/bin/env bash
# package_install: `cmake --install` of this build into a DESTDIR, then the
# installed tree moved elsewhere (relocatability), then:
#   - the layout: ternd in sbin, tern in bin, libtern.so -> .so.0 ->
#     .so.X.Y.Z with SONAME libtern.so.0, libtern.a, the public headers,
#     tern.pc, the CMake package with its version file, the man pages;
#   - a C consumer built with `pkg-config tern` from the moved tree, and
#     with a CMake project using find_package(tern) (tern::tern and
#     tern::tern_static), each run and its output checked;
#   - the installed `tern --version` and `ternd --version`.
# Environment (from ctest): TERN_BUILD, TERN_SRC, CC, TERN_SANITIZE
# (set: skipped).
set -euo pipefail

BUILD=${TERN_BUILD:?}
SRC=${TERN_SRC:?}
CC=${CC:-cc}
VERSION=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$BUILD/CMakeCache.txt")
MAJOR=${VERSION%%.*}
LIBDIR=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$BUILD/CMakeCache.txt")
LIBDIR=${LIBDIR:-lib}
# Packages are made from unsanitized builds (a sanitized libtern would
# need its runtime in every consumer): skipped in sanitizer builds.
if [ -n "${TERN_SANITIZE:-}" ]; then
    echo "SKIP: sanitizer build ($TERN_SANITIZE)"
    exit 77
fi

TMP=$(mktemp -d /tmp/tern-pkg-install.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fails=0
ok() { echo "  ok    $*"; }
fail() {
    echo "  FAIL  $*"
    fails=$((fails + 1))
}
check() { # what command...
    local what=$1
    shift
    if "$@"; then ok "$what"; else fail "$what"; fi
}

echo "== install into DESTDIR, prefix /opt/tern"
DESTDIR=$TMP/dest cmake --install "$BUILD" --prefix /opt/tern >"$TMP/install.log"
mv "$TMP/dest/opt/tern" "$TMP/moved"
P=$TMP/moved
rm -rf "$TMP/dest"

echo "== layout of the moved tree"
for f in sbin/ternd bin/tern "$LIBDIR/libtern.a" include/tern/tern.h \
    include/tern/errors.h "$LIBDIR/pkgconfig/tern.pc" \
    "$LIBDIR/cmake/tern/ternConfig.cmake" \
    "$LIBDIR/cmake/tern/ternConfigVersion.cmake" \
    "$LIBDIR/cmake/tern/ternTargets.cmake" \
    share/man/man1/tern.1 share/man/man8/ternd.8; do
    check "installed $f" test -f "$P/$f"
done
check "libtern.so -> libtern.so.$MAJOR" \
    test "$(readlink "$P/$LIBDIR/libtern.so")" = "libtern.so.$MAJOR"
check "libtern.so.$MAJOR -> libtern.so.$VERSION" \
    test "$(readlink "$P/$LIBDIR/libtern.so.$MAJOR")" = "libtern.so.$VERSION"
soname=$(readelf -d "$P/$LIBDIR/libtern.so.$VERSION" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
check "SONAME is libtern.so.$MAJOR (got $soname)" test "$soname" = "libtern.so.$MAJOR"
check "tern.pc names no build or install path" \
    bash -c "! grep -q -e '$BUILD' -e /opt/tern '$P/$LIBDIR/pkgconfig/tern.pc'"
check "only the public headers are installed" \
    test "$(cd "$P/include/tern" && echo *)" = "errors.h tern.h"

export LD_LIBRARY_PATH=$P/$LIBDIR
want="libtern $((${VERSION%%.*} * 10000 + $(echo "$VERSION" | cut -d. -f2) * 100 + ${VERSION##*.})) TERN_ENOTLEADER"

echo "== C consumer through pkg-config (PKG_CONFIG_PATH to the moved tree)"
export PKG_CONFIG_PATH=$P/$LIBDIR/pkgconfig
check "pkg-config --modversion tern = $VERSION" \
    test "$(pkg-config --modversion tern)" = "$VERSION"
# shellcheck disable=SC2046
if "$CC" -Werror -Wall -o "$TMP/c_pc" "$SRC/tests/package/consumer/consumer.c" \
    $(pkg-config --cflags --libs tern); then
    ok "consumer compiles and links with pkg-config"
    out=$("$TMP/c_pc" || true)
    check "consumer runs: \"$out\"" test "$out" = "$want"
    check "consumer loads the moved libtern" \
        bash -c "ldd '$TMP/c_pc' | grep -q '$P/$LIBDIR/libtern.so.$MAJOR'"
else
    fail "consumer compiles and links with pkg-config"
fi

echo "== C consumer through find_package(tern)"
if cmake -S "$SRC/tests/package/consumer" -B "$TMP/cb" -DCMAKE_PREFIX_PATH="$P" \
    -DCMAKE_C_COMPILER="$CC" >"$TMP/cb.log" 2>&1 &&
    cmake --build "$TMP/cb" -j2 >>"$TMP/cb.log" 2>&1; then
    ok "consumer project configures and builds"
    out=$("$TMP/cb/consumer_shared" || true)
    check "tern::tern consumer runs: \"$out\"" test "$out" = "$want"
    out=$(env -u LD_LIBRARY_PATH "$TMP/cb/consumer_static" || true)
    check "tern::tern_static consumer runs without libtern.so: \"$out\"" \
        test "$out" = "$want"
    check "tern::tern_static consumer does not load libtern.so" \
        bash -c "! env -u LD_LIBRARY_PATH ldd '$TMP/cb/consumer_static' | grep -q libtern"
else
    fail "consumer project configures and builds"
    cat "$TMP/cb.log"
fi

echo "== installed binaries"
out=$("$P/bin/tern" --version || true)
check "tern --version: \"$out\"" test "$out" = "tern $VERSION (libtern $VERSION)"
out=$("$P/sbin/ternd" --version || true)
check "ternd --version: \"$out\"" test "$out" = "ternd $VERSION"

echo "== $fails failed"
[ "$fails" -eq 0 ]
