#!/usr/bin/env bash
# train-vs-ddp.sh - data-parallel training throughput of dtrain next to PyTorch DDP on gloo: the
# Keras tutorial CNN (config/models/fmnist_cnn.json) on Fashion-MNIST, global batch 64 split
# across R workers, one thread per worker; samples/s, scaling efficiency and the ratio.
#
#   scripts/bench/train-vs-ddp.sh [--workers 1,2,4] [--net loopback|netns|both] [--steps N]
#       [--rate 1gbit] [--batch 64] [--rounds K] [--settle S] [--only dtrain,ddp] [--out DIR]
#       [--json]
#
#   --net      loopback (default): all workers on 127.0.0.1; netns: each on its own
#              scripts/netns-cluster.sh host (own namespace and address, egress shaped to --rate)
#   --steps    timed steps per run (default 100; 10 warm-up steps come first)
#   --rounds   run dtrain and DDP in turn K times (default 3); the best round of each counts,
#              since on a shared machine a slow round measures the neighbours
#   --settle   before each run wait up to S seconds (default 30) for the CPUs to be >= 80% idle;
#              the idle share is recorded and the table's footer gives its range
#   --only     run only these (the other prints n/a)
#   --out      keep the raw JSON results and logs in DIR (default: a temporary directory, removed)
#   --json     print {"runs": [{"net","workers","impl","round","samples_per_s","step_s"|"error"}]}
#              (every round, raw)
#
# dtrain: R daemons form a cluster (loopback: scripts/local-cluster.sh; netns: one dtraind per host
# with TF_CONFIG), then `dtrain --addr CHIEF bench train --workers R --model fmnist_cnn.json
# --batch 64 --steps N --json` ({"world_size","batch","samples_per_s","step_s"}). When it fails
# (not built yet, no cluster), dtrain's columns say n/a and the reason goes to stderr.
# DDP: scripts/bench/ddp_train.py, one process per worker (Adam, real Fashion-MNIST batches).
# Scaling efficiency = samples/s at R / (R * samples/s at R=1) of the same implementation, on the
# same network (R=1 runs on loopback for both networks when 1 is among --workers). Ratio > 1: dtrain
# is faster. Every process started is stopped on exit, every wait is bounded, the namespaces are
# removed. Environment: DT_NETNS_PREFIX (default dtbench), DT_BIN_DIR (default ./bin).
set -euo pipefail
PB_NAME=train-vs-ddp
# shellcheck source=scripts/bench/peers-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/peers-lib.sh"
cd "$ROOT"

WORKERS=1,2,4
NET=loopback
STEPS=100
RATE=1gbit
BATCH=64
ROUNDS=3
SETTLE=30
ONLY=dtrain,ddp
OUT=""
JSON=0
RUN_TIMEOUT=${DT_BENCH_RUN_TIMEOUT:-300}
MODEL=$ROOT/config/models/fmnist_cnn.json

usage() {
  sed -n '6,8s/^# \{0,1\}//p' "$0" >&2
  exit 2
}
while (($#)); do
  case $1 in
  --workers) WORKERS=${2:?--workers needs a value}; shift 2 ;;
  --net) NET=${2:?--net needs a value}; shift 2 ;;
  --steps) STEPS=${2:?--steps needs a value}; shift 2 ;;
  --rate) RATE=${2:?--rate needs a value}; shift 2 ;;
  --batch) BATCH=${2:?--batch needs a value}; shift 2 ;;
  --rounds) ROUNDS=${2:?--rounds needs a value}; shift 2 ;;
  --settle) SETTLE=${2:?--settle needs a value}; shift 2 ;;
  --only) ONLY=${2:?--only needs a value}; shift 2 ;;
  --out) OUT=${2:?--out needs a value}; shift 2 ;;
  --json) JSON=1; shift ;;
  -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
  *) note "unknown option '$1'"; usage ;;
  esac
done
[[ $WORKERS =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--workers '$WORKERS': use e.g. 1,2,4"
[[ $STEPS =~ ^[1-9][0-9]*$ ]] || die "--steps '$STEPS' must be a positive integer"
[[ $SETTLE =~ ^[0-9]+$ ]] || die "--settle '$SETTLE' must be whole seconds"
[[ $ROUNDS =~ ^[1-9][0-9]?$ ]] || die "--rounds '$ROUNDS' must be 1..99"
[[ $BATCH =~ ^[1-9][0-9]*$ ]] || die "--batch '$BATCH' must be a positive integer"
case $NET in
loopback) NETS=(loopback) ;;
netns) NETS=(netns) ;;
both) NETS=(loopback netns) ;;
*) die "--net must be loopback, netns or both, got '$NET'" ;;
esac
IFS=, read -ra WORKER_LIST <<<"$WORKERS"
for r in "${WORKER_LIST[@]}"; do
  ((r >= 1 && r <= 16)) || die "workers $r: use 1..16"
  ((BATCH % r == 0)) || die "the global batch $BATCH does not split evenly over $r workers"
done
wants() { [[ ,$ONLY, == *",$1,"* ]]; }
if [[ -n $OUT ]]; then
  mkdir -p "$OUT"
  WORK=$(cd "$OUT" && pwd)
  KEEP_WORK=1
else
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/dt-train-ddp.XXXXXX")
fi

HAVE_TORCH=0 HAVE_DTRAIN=0
if wants ddp; then
  if pb_have_torch; then
    HAVE_TORCH=1
  else note "$PY has no torch with gloo (apt-get install python3-torch): DDP columns n/a"; fi
fi
if wants dtrain; then
  if [[ -x $BIN_DIR/dtrain && -x $BIN_DIR/dtraind ]]; then HAVE_DTRAIN=1; else
    note "no $BIN_DIR/dtrain or dtraind (run make): dtrain columns n/a"
  fi
fi
for n in "${NETS[@]}"; do [[ $n != netns ]] || pb_netns_check; done

# run_dtrain NET R OUT: dtrain's figures from the cluster pb_dtrain_up formed.
run_dtrain() {
  local net=$1 r=$2 out=$3 dir=$WORK/dtrain-$1-$2
  ((DT_UP)) || return 1
  pb_on_host "$net" 0 timeout -k 5 "$RUN_TIMEOUT" "$BIN_DIR/dtrain" --addr "$CL_ADDR" \
    --token-file "$CL_TOKEN" bench train --workers "$r" --model "$MODEL" --batch "$BATCH" \
    --steps "$STEPS" --json >"$out" 2>"$dir/bench.err" </dev/null || {
    note "dtrain ($net, R=$r): $(head -c 300 "$dir/bench.err" | tr '\n' ' ')"
    return 1
  }
}

# run_ddp NET R OUT
run_ddp() {
  local net=$1 r=$2 out=$3 dir=$WORK/ddp-$1-$2-$ROUND master iface=lo i pids=() rc=0
  mkdir -p "$dir"
  if [[ $net == loopback ]]; then master=127.0.0.1:$(pb_free_port); else
    master=$(pb_addr netns 0):29500
    iface=eth0
  fi
  for ((i = 0; i < r; i++)); do
    pb_on_host "$net" "$i" timeout -k 5 "$RUN_TIMEOUT" "$PY" "$ROOT/scripts/bench/ddp_train.py" \
      --rank "$i" --world "$r" --master "$master" --iface "$iface" --steps "$STEPS" \
      --global-batch "$BATCH" --threads 1 --json >"$dir/rank$i.out" 2>"$dir/rank$i.err" </dev/null &
    pids+=($!)
    PIDS+=($!)
  done
  pb_wait_group "${pids[@]}" || rc=1
  if ((rc)); then
    note "DDP ($net, R=$r) failed: $(cat "$dir"/rank*.err | grep -v '^$' | tail -n 3 | tr '\n' ' ')"
    return 1
  fi
  cp "$dir/rank0.out" "$out"
}

RESULTS=$WORK/results.jsonl
: >"$RESULTS"
record() { # NET R IMPL ROUND IDLE FILE|-
  "$PY" - "$@" >>"$RESULTS" <<'EOF'
import json, sys
net, r, impl, rnd, idle, f = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]
rec = {"net": net, "workers": r, "impl": impl, "round": rnd, "idle_pct": int(idle) if idle.isdigit() else None}
try:
    d = None
    if f != "-":  # one JSON document, pretty or not, possibly after other lines
        text = open(f).read().strip()
        try:
            d = json.loads(text)
        except ValueError:
            d = json.loads(text.splitlines()[-1])
    rec.update(samples_per_s=float(d["samples_per_s"]), step_s=float(d["step_s"]))
except Exception as e:
    rec["error"] = "no result" if f == "-" else "unreadable result: %s" % e
print(json.dumps(rec))
EOF
}

# Per network and worker count: one dtrain cluster, then ROUNDS rounds of dtrain and DDP in turn.
for net in "${NETS[@]}"; do
  for r in "${WORKER_LIST[@]}"; do
    # One worker has no network: R=1 runs once, on loopback, and serves both networks.
    if ((r == 1)) && [[ $net == netns && ${NETS[0]} == loopback ]]; then continue; fi
    rnet=$net
    ((r > 1)) || rnet=loopback
    if [[ $rnet == netns ]]; then pb_netns_up "$r" "$RATE"; fi
    note "$rnet, R=$r: $STEPS steps, global batch $BATCH, $ROUNDS round(s)"
    DT_UP=0
    if ((HAVE_DTRAIN)) && pb_dtrain_up "$rnet" "$r" "$WORK/dtrain-$rnet-$r"; then DT_UP=1; fi
    for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
      for impl in dtrain ddp; do
        f=$WORK/$impl-$rnet-$r-$ROUND.json
        have=$HAVE_DTRAIN
        [[ $impl == dtrain ]] || have=$HAVE_TORCH
        idle=-
        ((have == 0)) || idle=$(pb_settle "$SETTLE")
        if ((have)) && "run_$impl" "$rnet" "$r" "$f"; then
          record "$rnet" "$r" "$impl" "$ROUND" "$idle" "$f"
        else record "$rnet" "$r" "$impl" "$ROUND" "$idle" -; fi
      done
    done
    ((DT_UP == 0)) || pb_dtrain_down "$rnet" "$WORK/dtrain-$rnet-$r"
    pb_cleanup
  done
done

"$PY" - "$RESULTS" "$JSON" "$RATE" "$(nproc)" "$BATCH" <<'EOF'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
as_json, rate, ncpu, batch = sys.argv[2] == "1", sys.argv[3], sys.argv[4], sys.argv[5]
if as_json:
    print(json.dumps({"rate": rate, "cpus": int(ncpu), "batch": int(batch), "runs": runs}))
    sys.exit(0)
# The best round counts (the machine is shared: slower rounds measure the neighbours).
sps = {}
for r in runs:
    k, v = (r["net"], r["workers"], r["impl"]), r.get("samples_per_s")
    if v is not None and (sps.get(k) is None or v > sps[k]):
        sps[k] = v
def base(impl):
    return sps.get(("loopback", 1, impl))
def cell(v, f="%.1f"):
    return f % v if v is not None else "n/a"
print("# data-parallel training, fmnist CNN, global batch %s, 1 thread per worker; %s CPUs" % (batch, ncpu))
nets = sorted({r["net"] for r in runs if r["workers"] > 1}, key=lambda n: n != "loopback") or ["loopback"]
for net in nets:
    where = "loopback (127.0.0.1)" if net == "loopback" else "netns hosts, %s egress each" % rate
    print("\n## %s" % where)
    print("%-3s %12s %12s %10s %10s %13s" % ("R", "dtrain s/s", "DDP s/s", "dtrain eff", "DDP eff", "dtrain/DDP"))
    for R in sorted({r["workers"] for r in runs}):
        n = "loopback" if R == 1 else net
        d, t = sps.get((n, R, "dtrain")), sps.get((n, R, "ddp"))
        eff = lambda v, impl: cell(v / (R * base(impl)) * 100, "%.0f%%") if v and base(impl) else "n/a"
        print("%-3d %12s %12s %10s %10s %13s" % (R, cell(d), cell(t), eff(d, "dtrain"), eff(t, "ddp"),
                                                 "%.2fx" % (d / t) if d and t else "n/a"))
idle = sorted(r["idle_pct"] for r in runs if r.get("idle_pct") is not None)
if idle:
    print("\nCPU idle just before each run: %d%% to %d%% (median %d%%); below ~80%% other work on the "
          "machine skews the figures" % (idle[0], idle[-1], idle[len(idle) // 2]))
failed = sorted({(r["impl"], r["net"], r["workers"]) for r in runs if "error" in r})
if failed:
    print("\nn/a (no result in some round): " + ", ".join("%s %s R=%d" % f for f in failed))
EOF
