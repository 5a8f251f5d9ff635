#!/usr/bin/env bash
# allreduce-tls.sh - what TLS costs the ring: `dtrain bench allreduce` on R daemons on loopback,
# plaintext and mutual TLS (scripts/gen-tls.sh certificates), in turns, same sizes and iterations.
#
#   scripts/bench/allreduce-tls.sh [--sizes 1M,64M] [--world 2] [--iters N] [--rounds K] [--json]
#
# Each round starts a plaintext cluster and a TLS cluster (scripts/local-cluster.sh, token on both),
# runs the bench on each and stops it; a size's best round counts, since on a shared machine a slow
# round measures the neighbours. Prints a table with both times and the ratio TLS / plaintext.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=${DT_BIN_DIR:-$ROOT/bin}
sizes=1M,64M world=2 iters=5 rounds=2 json=0
while (($#)); do
  case $1 in
  --sizes) sizes=$2; shift 2 ;;
  --world) world=$2; shift 2 ;;
  --iters) iters=$2; shift 2 ;;
  --rounds) rounds=$2; shift 2 ;;
  --json) json=1; shift ;;
  -h | --help) sed -n '2,9s/^# \{0,1\}//p' "$0"; exit 0 ;;
  *) echo "allreduce-tls.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
command -v openssl >/dev/null || { echo "allreduce-tls.sh: needs openssl (make deps)" >&2; exit 2; }
[[ -x $BIN/dtrain ]] || { echo "allreduce-tls.sh: no $BIN/dtrain: run make" >&2; exit 2; }

out=$(mktemp -d)
trap '"$ROOT/scripts/local-cluster.sh" stop --dir "$out/plain" >/dev/null 2>&1 || true
      "$ROOT/scripts/local-cluster.sh" stop --dir "$out/tls" >/dev/null 2>&1 || true
      rm -rf "$out"' EXIT
"$ROOT/scripts/gen-tls.sh" -o "$out/certs" host=127.0.0.1 client >/dev/null
tlsd=(--tls-cert "$out/certs/host.pem" --tls-key "$out/certs/host.key" --tls-ca "$out/certs/ca.pem")
tlsc=(--tls-cert "$out/certs/client.pem" --tls-key "$out/certs/client.key" --tls-ca "$out/certs/ca.pem")

# run MODE ROUND: one cluster, one bench, results in $out/MODE-ROUND.json
run() {
  local mode=$1 r=$2 dir=$out/$1 base
  local -a dflags=() cflags=()
  [[ $mode == tls ]] && dflags=("${tlsd[@]}") cflags=("${tlsc[@]}")
  "$ROOT/scripts/local-cluster.sh" "$world" --dir "$dir" --timeout 60 -- "${dflags[@]}" >/dev/null
  base=$(sed -n 's/.*"address": "\([^"]*\)".*/\1/p' "$dir/worker-0.ready")
  "$BIN/dtrain" --addr "$base" --token-file "$dir/token" "${cflags[@]}" bench allreduce \
    --sizes "$sizes" --iters "$iters" --verify --json >"$out/$mode-$r.json"
  "$ROOT/scripts/local-cluster.sh" stop --dir "$dir" >/dev/null
}
for ((r = 0; r < rounds; r++)); do
  run plain "$r"
  run tls "$r"
done

/usr/bin/python3 - "$out" "$rounds" "$world" "$json" <<'PY'
import json, sys
out, rounds, world, as_json = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
best = {}
for mode in ("plain", "tls"):
    for r in range(rounds):
        for row in json.load(open(f"{out}/{mode}-{r}.json"))["rows"]:
            k = (mode, row["bytes"])
            if k not in best or row["time_s"] < best[k]["time_s"]:
                best[k] = row
sizes = sorted({b for (_, b) in best})
if as_json:
    print(json.dumps({"world_size": world, "rows": [
        {"bytes": b, "plain": best[("plain", b)], "tls": best[("tls", b)],
         "ratio_time": best[("tls", b)]["time_s"] / best[("plain", b)]["time_s"]} for b in sizes]}))
    sys.exit(0)
print(f"ring all-reduce, {world} daemons on loopback, plaintext vs mutual TLS, best of {rounds} rounds")
print(f"{'size':>10}  {'plain ms':>9}  {'plain busbw':>11}  {'TLS ms':>9}  {'TLS busbw':>10}  {'TLS/plain':>9}")
for b in sizes:
    p, t = best[("plain", b)], best[("tls", b)]
    name = f"{b >> 20}M" if b >= 1 << 20 else f"{b >> 10}K"
    print(f"{name:>10}  {p['time_s']*1e3:9.2f}  {p['busbw_GBps']:8.3f} GB/s  {t['time_s']*1e3:9.2f}"
          f"  {t['busbw_GBps']:7.3f} GB/s  {t['time_s']/p['time_s']:8.2f}x")
PY
