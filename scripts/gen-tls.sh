#!/usr/bin/env bash
# gen-tls.sh - a private CA and one certificate per host (and per client) for dtrain's TLS.
#
#   scripts/gen-tls.sh [-o DIR] [--days N] NAME[=SAN,SAN...]...
#
# Each NAME gets DIR/NAME.pem (certificate) and DIR/NAME.key (private key, mode 0600), signed by
# DIR/ca.pem (made with DIR/ca.key on the first run, reused after, so hosts can be added later).
# SANs are the names and addresses peers dial, exactly as they appear in TF_CONFIG ("host:port"
# without the port): an IP address becomes an IP SAN, anything else a DNS SAN. A NAME without
# SANs is a client certificate (for `dtrain --tls-cert`). Every certificate is good for both
# ends of a connection (serverAuth + clientAuth), since a daemon dials its peers with the same one.
#
# Example (two hosts and an operator's CLI):
#   scripts/gen-tls.sh -o /etc/dtrain/tls host1=10.0.0.1,host1.example host2=10.0.0.2 admin
#   host1: dtraind --tls-cert host1.pem --tls-key host1.key --tls-ca ca.pem ...
#   CLI:   dtrain --tls-cert admin.pem --tls-key admin.key --tls-ca ca.pem cluster
# Keep ca.key off the cluster's hosts: it signs new identities.
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

out=. days=825
names=()
while (($#)); do
  case $1 in
  -o | --out) out=${2:?-o needs a directory}; shift 2 ;;
  --days) days=${2:?--days needs a number}; shift 2 ;;
  -h | --help) usage; exit 0 ;;
  -*) echo "gen-tls.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  *) names+=("$1"); shift ;;
  esac
done
((${#names[@]})) || { usage >&2; exit 2; }
[[ $days =~ ^[0-9]+$ && $days -ge 1 ]] || { echo "gen-tls.sh: --days $days: give a whole number of days" >&2; exit 2; }
command -v openssl >/dev/null || { echo "gen-tls.sh: needs the openssl command (apt-get install openssl)" >&2; exit 2; }
mkdir -p "$out"
umask 077
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [[ ! -f $out/ca.pem || ! -f $out/ca.key ]]; then
  openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 \
    -keyout "$out/ca.key" -out "$out/ca.pem" -days "$days" -subj "/CN=dtrain CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>"$tmp/err" ||
    { cat "$tmp/err" >&2; exit 1; }
  chmod 644 "$out/ca.pem"
  echo "made $out/ca.pem (CA certificate) and $out/ca.key (keep it private)"
fi

for spec in "${names[@]}"; do
  name=${spec%%=*}
  sans=
  [[ $spec == *=* ]] && sans=${spec#*=}
  [[ $name =~ ^[A-Za-z0-9._-]+$ ]] || { echo "gen-tls.sh: '$name': use letters, digits, '.', '_' and '-' in a NAME" >&2; exit 2; }
  san_ext=
  IFS=, read -r -a list <<<"$sans"
  for s in "${list[@]}"; do
    [[ -n $s ]] || continue
    if [[ $s =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ || $s == *:* ]]; then
      s=${s#[}; s=${s%]}
      san_ext+="${san_ext:+,}IP:$s"
    else
      san_ext+="${san_ext:+,}DNS:$s"
    fi
  done
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=serverAuth,clientAuth"
    [[ -n $san_ext ]] && echo "subjectAltName=$san_ext"
  } >"$tmp/ext"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 \
    -keyout "$out/$name.key" -out "$tmp/$name.csr" -subj "/CN=$name" 2>"$tmp/err" ||
    { cat "$tmp/err" >&2; exit 1; }
  openssl x509 -req -in "$tmp/$name.csr" -CA "$out/ca.pem" -CAkey "$out/ca.key" -sha256 \
    -set_serial "0x$(openssl rand -hex 16)" -days "$days" -extfile "$tmp/ext" \
    -out "$out/$name.pem" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
  chmod 644 "$out/$name.pem"
  what="client: no SANs"
  [[ -n $san_ext ]] && what=$san_ext
  echo "made $out/$name.pem and $out/$name.key ($what)"
done
