#!/usr/bin/env bash
# package_man: docs/man/tern.1 and docs/man/ternd.8 against the programs.
#   - each page renders without a warning (groff -ww, and man -l when man
#     is installed; groff missing: that check is skipped);
#   - every command (first words of the command lines) and every option of
#     `tern --help` appears in tern.1;
#   - every flag of `ternd --help` and of node/config.c's key table, and
#     every INI section and key of that table, appears in ternd.8, and
#     every flag of the key table appears in `ternd --help`.
# Environment (from ctest): TERN_SRC, TERND, TERN_CLI.
set -euo pipefail

SRC=${TERN_SRC:?}
TERND=${TERND:?}
TERN_CLI=${TERN_CLI:?}
MAN1=$SRC/docs/man/tern.1
MAN8=$SRC/docs/man/ternd.8
fails=0
ok() { echo "  ok    $*"; }
fail() {
    echo "  FAIL  $*"
    fails=$((fails + 1))
}

# Text of a page as a reader sees it (roff escapes of '-' undone), to grep.
page_text() { sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' "$1"; }

echo "== rendering"
for page in "$MAN1" "$MAN8"; do
    if command -v groff >/dev/null; then
        w=$(groff -man -Tutf8 -ww -z "$page" 2>&1)
        if [ -z "$w" ]; then ok "groff renders $(basename "$page") without warnings"; else
            fail "groff warns on $(basename "$page"): $w"
        fi
    else
        echo "  skip  groff is not installed"
    fi
    if command -v man >/dev/null; then
        w=$(MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null)
        if [ -z "$w" ]; then ok "man -l renders $(basename "$page") without warnings"; else
            fail "man -l warns on $(basename "$page"): $w"
        fi
    fi
done

echo "== tern --help against tern.1"
help=$("$TERN_CLI" --help)
t1=$(page_text "$MAN1")
# Command lines of the usage: two spaces, then lower-case words, e.g.
# "  queue create NAME ..." -> "queue create"; "  produce QUEUE" -> produce;
# "... | queue delete NAME" -> "queue delete".
usage_cmds=$(printf '%s\n' "$help" | sed -n '/^usage:/,/^[A-Z]/p' | grep '^  [a-z]')
mapfile -t cmds < <({
    sed -nE 's/^  ([a-z]+( [a-z]+)?)( [^a-z].*|)$/\1/p' <<<"$usage_cmds"
    grep -oE '\| [a-z]+ [a-z]+' <<<"$usage_cmds" | cut -c3-
} | sort -u)
[ ${#cmds[@]} -ge 20 ] || fail "only ${#cmds[@]} commands found in tern --help"
n=0
for c in "${cmds[@]}"; do
    case "$c" in RETENTION*) continue ;; esac
    if grep -qF -- "$c" <<<"$t1"; then n=$((n + 1)); else fail "tern.1 lacks command \"$c\""; fi
done
ok "$n commands of tern --help are in tern.1: ${cmds[*]}"
mapfile -t opts < <(grep -oE -- '(^|[^a-z-])--?[a-z][a-z-]*' <<<"$help" | grep -oE -- '--?[a-z][a-z-]*' | sort -u)
n=0
for o in "${opts[@]}"; do
    if grep -qE -- "(^|[^a-z-])$o([^a-z-]|$)" <<<"$t1"; then n=$((n + 1)); else fail "tern.1 lacks option $o"; fi
done
ok "$n options of tern --help are in tern.1"

echo "== ternd --help and node/config.c against ternd.8"
dhelp=$("$TERND" --help)
t8=$(page_text "$MAN8")
mapfile -t flags < <(grep -oE -- '--[a-z][a-z-]*' <<<"$dhelp" | sort -u)
n=0
for f in "${flags[@]}"; do
    if grep -qE -- "(^|[^a-z-])$f([^a-z-]|$)" <<<"$t8"; then n=$((n + 1)); else fail "ternd.8 lacks flag $f"; fi
done
ok "$n flags of ternd --help are in ternd.8"
# Rows of the key table: {"section", "key", "--flag", ...
mapfile -t rows < <(grep -oE '\{"[a-z]+", "[a-z_]+", "--[a-z-]+"' "$SRC/node/config.c" |
    sed -E 's/\{"([a-z]+)", "([a-z_]+)", "(--[a-z-]+)"/\1 \2 \3/')
[ ${#rows[@]} -ge 50 ] || fail "only ${#rows[@]} rows found in node/config.c's key table"
n=0
for r in "${rows[@]}"; do
    read -r sec key flag <<<"$r"
    grep -qF "[$sec]" <<<"$t8" || fail "ternd.8 lacks section [$sec]"
    grep -qE "^\.BR $key \"? =" "$MAN8" || fail "ternd.8 lacks key $key of [$sec]"
    grep -qE -- "(^|[^a-z-])$flag([^a-z-]|$)" <<<"$t8" || fail "ternd.8 lacks flag $flag"
    grep -qE -- "(^|[^a-z-])$flag([^a-z-]|$)" <<<"$dhelp" || fail "ternd --help lacks flag $flag"
    n=$((n + 1))
done
grep -qF "[peers]" <<<"$t8" || fail "ternd.8 lacks section [peers]"
ok "$n keys of node/config.c checked in ternd.8 and ternd --help"

echo "== $fails failed"
[ "$fails" -eq 0 ]
