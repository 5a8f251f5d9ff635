#!/usr/bin/env bash
# hier-netns.sh - several CPU replicas a host on shaped links: the hierarchical all-reduce (in-host
# reduce-scatter, one host ring per replica index on its shard, in-host all-gather) against the link
# rate and the flat ring, and training samples/s of G replicas in one daemon per host against G
# daemons per host (one replica each) on the same links, the Keras tutorial CNN
# (config/models/fmnist_cnn.json) on Fashion-MNIST.
#
#   scripts/bench/hier-netns.sh [--hosts H] [--devices G] [--rate 1gbit] [--sizes 4M,16M,64M]
#       [--iters N] [--steps N] [--batch B] [--only allreduce,train] [--settle S] [--out DIR]
#       [--json]
#
#   --hosts    netns hosts (default 2), each its own namespace, egress shaped to --rate
#   --devices  CPU replicas a host (default 2): one dtraind with $.strategy.devices of G, against
#              G dtrainds a host with one replica each (the flat ring over H * G ranks)
#   --sizes    all-reduce sizes (default 4M,16M,64M; the tutorial CNN's gradient is added)
#   --iters    timed all-reduces a size (default 5, after 0.5 s of warm-up)
#   --steps    timed training steps (default 60, after 10 warm-up steps); --batch the global batch
#              (default 256: 64 a replica with H = G = 2)
#   --settle   before each run wait up to S seconds (default 20) for the CPUs to be >= 80% idle
#   --out      keep the raw JSON results and logs in DIR (default: a temporary directory, removed)
#   --json     print {"link_gbit", "allreduce": <dtrain bench allreduce --devices --json>,
#              "train": {"hier": <bench train --json>, "daemons": <bench train --json>}}
#
# Link share: a host's egress carries 2(H-1)/H of the buffer in either layout (the hierarchical
# all-reduce sends each shard once per host; the flat ring over H daemons the whole buffer), so
# share = algbw * 2(H-1)/H / link. busbw is nccl-tests' over all H * G replicas (algbw * 2(R-1)/R).
# With G daemons a host, the flat ring over H * G ranks crosses each host link with 2(R-1)/R of the
# buffer per rank pair that spans hosts: (2(R-1)/R) / (2(H-1)/H) times the bytes of the
# hierarchical layout (1.5x at H = G = 2). Every process started is stopped on exit, the
# namespaces are removed. Runs as root (network namespaces). DT_NETNS_PREFIX (default dtbench).
set -euo pipefail
PB_NAME=hier-netns
# shellcheck source=scripts/bench/peers-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/peers-lib.sh"
cd "$ROOT"

HOSTS=2
DEVICES=2
RATE=1gbit
SIZES=4M,16M,64M
ITERS=5
STEPS=60
BATCH=256
ONLY=allreduce,train
SETTLE=20
OUT=""
JSON=0
MODEL=$ROOT/config/models/fmnist_cnn.json

usage() {
  sed -n '8,10s/^# \{0,1\}//p' "$0" >&2
  exit 2
}
while (($#)); do
  case $1 in
  --hosts) HOSTS=${2:?--hosts needs a value}; shift 2 ;;
  --devices) DEVICES=${2:?--devices needs a value}; shift 2 ;;
  --rate) RATE=${2:?--rate needs a value}; shift 2 ;;
  --sizes) SIZES=${2:?--sizes needs a value}; shift 2 ;;
  --iters) ITERS=${2:?--iters needs a value}; shift 2 ;;
  --steps) STEPS=${2:?--steps needs a value}; shift 2 ;;
  --batch) BATCH=${2:?--batch needs a value}; shift 2 ;;
  --only) ONLY=${2:?--only needs a value}; shift 2 ;;
  --settle) SETTLE=${2:?--settle needs a value}; shift 2 ;;
  --out) OUT=${2:?--out needs a value}; shift 2 ;;
  --json) JSON=1; shift ;;
  -h | --help) usage ;;
  *) die "unknown option $1 (see --help)" ;;
  esac
done
num() { [[ $1 =~ ^[0-9]+$ ]]; }
if ! num "$HOSTS" || ((HOSTS < 2 || HOSTS > 16)); then die "--hosts: give 2..16"; fi
if ! num "$DEVICES" || ((DEVICES < 1 || DEVICES > 16)); then die "--devices: give 1..16"; fi
if ! num "$STEPS" || ((STEPS < 1)); then die "--steps: give a positive number"; fi
if ! num "$BATCH" || ((BATCH % (HOSTS * DEVICES) != 0)); then
  die "--batch $BATCH must be a multiple of hosts * devices = $((HOSTS * DEVICES))"
fi
[[ -x $BIN_DIR/dtrain && -x $BIN_DIR/dtraind ]] || die "no $BIN_DIR/dtrain or dtraind: run make"
pb_netns_check

if [[ -n $OUT ]]; then
  mkdir -p "$OUT"
  WORK=$(cd "$OUT" && pwd)
  KEEP_WORK=1
else
  WORK=$(mktemp -d /tmp/hier-netns.XXXXXX)
fi

# The tutorial CNN's gradient (its parameters, float32) as one more all-reduce size.
PARAMS=$("$BIN_DIR/dtrain" summary "$MODEL" --json |
  "$PY" -c 'import json,sys; print(sum(l["params"] for l in json.load(sys.stdin)["layers"]))')
GRAD_BYTES=$((PARAMS * 4))

pb_netns_up "$HOSTS" "$RATE"
LINK=$(pb_link_check hier)
note "$HOSTS netns hosts at $RATE (one TCP stream carries $LINK Gbit/s); the tutorial CNN: $PARAMS parameters ($GRAD_BYTES bytes of gradient)"

# daemons_up PER_HOST DIR: PER_HOST dtrainds on every host (ports 7070..), ranks host-major, so
# a host's daemons are ring neighbours; sets CL_ADDR, CL_TOKEN, CL_PIDS.
daemons_up() {
  local per=$1 dir=$2 i k cluster="" readies=() idx=0
  mkdir -p "$dir"
  CL_PIDS=()
  CL_TOKEN=$dir/token
  (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$CL_TOKEN")
  for ((i = 0; i < HOSTS; i++)); do
    for ((k = 0; k < per; k++)); do cluster+="${cluster:+,}\"$(pb_addr netns "$i"):$((7070 + k))\""; done
  done
  CL_ADDR=$(pb_addr netns 0):7070
  for ((i = 0; i < HOSTS; i++)); do
    for ((k = 0; k < per; k++)); do
      mkdir -p "$dir/r$idx"
      "$NETNS" exec "$i" env TF_CONFIG="{\"cluster\":{\"worker\":[$cluster]},\"task\":{\"type\":\"worker\",\"index\":$idx}}" \
        "$BIN_DIR/dtraind" --token-file "$CL_TOKEN" --state-dir "$dir/r$idx" --ready-file "$dir/r$idx.ready" \
        >"$dir/r$idx.log" 2>&1 </dev/null &
      CL_PIDS+=($!)
      PIDS+=($!)
      readies+=("$dir/r$idx.ready")
      idx=$((idx + 1))
    done
  done
  pb_wait_files 60 "${readies[@]}" || {
    pb_stop_pids "${CL_PIDS[@]}"
    die "$((HOSTS * per)) daemons did not form in 60 s; see $dir/r*.log"
  }
}

dtr() { "$NETNS" exec 0 "$BIN_DIR/dtrain" --addr "$CL_ADDR" --token-file "$CL_TOKEN" "$@"; }
train() {
  dtr bench train --workers "$1" --devices "$2" --model "$MODEL" --batch "$BATCH" --steps "$STEPS" \
    --timeout 900 --json
}

echo '{}' >"$WORK/allreduce.json"
echo '{}' >"$WORK/train-hier.json"
echo '{}' >"$WORK/train-daemons.json"
IDLE=()
# 1. one daemon a host, G replicas each.
daemons_up 1 "$WORK/hier"
if wants allreduce; then
  IDLE+=("$(pb_settle "$SETTLE")")
  dtr bench allreduce --devices "$DEVICES" --sizes "$SIZES,$GRAD_BYTES" --iters "$ITERS" \
    --warmup-s 0.5 --verify --no-stream --timeout 900 --json >"$WORK/allreduce.json" ||
    die "bench allreduce --devices $DEVICES failed (see $WORK/hier/r*.log)"
fi
if wants train; then
  IDLE+=("$(pb_settle "$SETTLE")")
  train "$HOSTS" "$DEVICES" >"$WORK/train-hier.json" 2>"$WORK/train-hier.err" ||
    die "bench train --devices $DEVICES failed: $(tail -n 2 "$WORK/train-hier.err")"
fi
pb_stop_pids "${CL_PIDS[@]}"
# 2. G daemons a host, one replica each.
if wants train; then
  daemons_up "$DEVICES" "$WORK/daemons"
  IDLE+=("$(pb_settle "$SETTLE")")
  train "$((HOSTS * DEVICES))" 1 >"$WORK/train-daemons.json" 2>"$WORK/train-daemons.err" ||
    die "bench train with $DEVICES daemons a host failed: $(tail -n 2 "$WORK/train-daemons.err")"
  pb_stop_pids "${CL_PIDS[@]}"
fi

"$PY" - "$WORK" "$JSON" "$LINK" "$RATE" "$HOSTS" "$DEVICES" "$GRAD_BYTES" "$(nproc)" "${IDLE[*]:-}" <<'PY'
import json, sys
work, as_json, link, rate, H, G, grad, ncpu, idle = sys.argv[1:]
H, G, grad = int(H), int(G), int(grad)
ar = json.load(open(f"{work}/allreduce.json"))
th = json.load(open(f"{work}/train-hier.json"))
td = json.load(open(f"{work}/train-daemons.json"))
units = {"k": 1e3, "m": 1e6, "g": 1e9}
r = rate.lower().rstrip("bit").rstrip("bps")
link_gbit = float(r[:-1]) * units[r[-1]] / 1e9 if r[-1] in units else float(r) / 1e9
if as_json == "1":
    print(json.dumps({"link_gbit": link_gbit, "one_stream_gbit": link, "allreduce": ar,
                      "train": {"hier": th, "daemons": td}}, indent=1))
    sys.exit(0)
wire = 2 * (H - 1) / H  # of the buffer, on each host's egress
print(f"{H} netns hosts, egress {rate} ({link_gbit:g} Gbit/s; one TCP stream carries {link} Gbit/s), "
      f"{ncpu} CPUs, {G} CPU replicas a host")
if ar.get("hier_rows"):
    print(f"\nall-reduce: hierarchical ({H} daemons x {G} replicas) vs the flat ring ({H} daemons x 1)")
    print(f"{'size':>10} {'hier ms':>9} {'busbw GB/s':>11} {'link share':>11} {'flat ms':>9} "
          f"{'link share':>11} {'verified':>9}")
    for h, f in zip(ar["hier_rows"], ar["rows"]):
        b = h["bytes"]
        share = lambda t: b / t * wire * 8 / 1e9 / link_gbit if t > 0 else 0
        name = (f"{b >> 20}M" if b and b % (1 << 20) == 0 else
                f"{b >> 10}K" if b and b % 1024 == 0 else f"{b / 1e6:.2f}MB")
        if b == grad:
            name += "*"
        print(f"{name:>10} {h['time_s'] * 1e3:9.1f} {h['busbw_GBps']:11.3f} {share(h['time_s']):10.0%} "
              f"{f['time_s'] * 1e3:9.1f} {share(f['time_s']):10.0%} {str(h.get('verified', '')):>9}")
    print("  * the tutorial CNN's gradient; link share = algbw * 2(H-1)/H / link rate")
if th.get("samples_per_s") and td.get("samples_per_s"):
    print(f"\ntraining, tutorial CNN, global batch {th['batch']}, {th['timed_steps']} timed steps:")
    print(f"  {H} daemons x {G} replicas: {th['samples_per_s']:.0f} samples/s ({th['step_s'] * 1e3:.1f} ms/step)")
    print(f"  {H * G} daemons ({G} a host) x 1: {td['samples_per_s']:.0f} samples/s ({td['step_s'] * 1e3:.1f} ms/step)")
    print(f"  ratio: {th['samples_per_s'] / td['samples_per_s']:.2f}x")
if idle:
    print(f"CPU idle before the runs: {idle.replace(' ', '%, ')}%")
PY
