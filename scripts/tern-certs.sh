#!/usr/bin/env bash
# Creates a cluster's credentials with the openssl tool: a cluster CA, one
# certificate per node (subject CN "node-<id>", signed by the CA, with the
# addresses given by --san as subjectAltName IPs), client certificates
# (CN = the user name) and the cluster secret for the shm and rdma
# handshakes (64 hex digits).
#
#   scripts/tern-certs.sh [--san IP]... [--client NAME]... [--days N] DIR ID...
#
# DIR/ca.pem, DIR/ca.key               the cluster CA (keep ca.key offline)
# DIR/node<ID>.pem, DIR/node<ID>.key   per node: [security] node_cert/node_key
# DIR/client-<NAME>.pem, .key          per --client
# DIR/cluster.secret                   [security] cluster_secret_file
#
# Keys are EC P-256. DIR is created with mode 0700, every key and the
# secret with 0600. Existing files are kept: run it again to add nodes or
# clients to the same CA. 127.0.0.1 is always among the SAN IPs.
set -euo pipefail

usage() {
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

sans=(127.0.0.1)
clients=()
days=3650
while [ $# -gt 0 ]; do
    case "$1" in
    --san) [ $# -ge 2 ] || usage; sans+=("$2"); shift 2 ;;
    --client) [ $# -ge 2 ] || usage; clients+=("$2"); shift 2 ;;
    --days) [ $# -ge 2 ] || usage; days="$2"; shift 2 ;;
    -h | --help) usage ;;
    --*) usage ;;
    *) break ;;
    esac
done
[ $# -ge 1 ] || usage
dir="$1"
shift
for id in "$@"; do
    [[ "$id" =~ ^[1-9][0-9]*$ ]] || { echo "tern-certs: bad node id '$id'" >&2; exit 2; }
done
for name in "${clients[@]}"; do
    [[ "$name" =~ ^[A-Za-z0-9._-]{1,64}$ ]] ||
        { echo "tern-certs: bad client name '$name'" >&2; exit 2; }
done

umask 077
mkdir -p "$dir"
chmod 700 "$dir"

newkey() { # newkey FILE
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 \
        -out "$1" 2>/dev/null
    chmod 600 "$1"
}

if [ ! -s "$dir/ca.pem" ]; then
    newkey "$dir/ca.key"
    openssl req -new -x509 -key "$dir/ca.key" -out "$dir/ca.pem" \
        -days "$days" -subj "/CN=tern cluster CA" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi

san_list=""
for ip in "${sans[@]}"; do
    san_list="${san_list:+$san_list,}IP:$ip"
done

sign() { # sign NAME CN EKU
    local name="$1" cn="$2" eku="$3" ext
    [ -s "$dir/$name.pem" ] && return 0
    newkey "$dir/$name.key"
    ext=$(mktemp)
    {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature"
        echo "extendedKeyUsage=$eku"
        echo "subjectAltName=$san_list"
    } >"$ext"
    openssl req -new -key "$dir/$name.key" -subj "/CN=$cn" 2>/dev/null |
        openssl x509 -req -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
            -CAcreateserial -days "$days" -extfile "$ext" \
            -out "$dir/$name.pem" 2>/dev/null
    rm -f "$ext"
}

for id in "$@"; do
    sign "node$id" "node-$id" "serverAuth,clientAuth"
done
for name in "${clients[@]}"; do
    sign "client-$name" "$name" "clientAuth"
done

if [ ! -s "$dir/cluster.secret" ]; then
    openssl rand -hex 32 >"$dir/cluster.secret"
    chmod 600 "$dir/cluster.secret"
fi
echo "tern-certs: $dir: CA, nodes ${*:-none}, clients ${clients[*]:-none}, secret"
