#!/usr/bin/env bash
# train-vs-ddp.sh - data-parallel training throughput of dtrain next to PyTorch DDP on gloo: the
# Keras tutorial CNN (config/models/fmnist_cnn.json) on Fashion-MNIST, global batch 64 split
# across R workers (or --local-batch: B per worker, weak scaling), one thread per worker;
# samples/s, scaling efficiency and the ratio.
#
#   scripts/bench/train-vs-ddp.sh [--workers 1,2,4] [--net loopback|netns|both] [--steps N]
#       [--rate 1gbit] [--batch 64 | --local-batch 32,256,...] [--compression none,bf16,f16]
#       [--first-bucket-mb MB] [--rounds K] [--settle S] [--only dtrain,ddp] [--out DIR] [--json]
#
#   --net      loopback (default): all workers on 127.0.0.1; netns: each on its own
#              scripts/netns-cluster.sh host (own namespace and address, egress shaped to --rate)
#   --steps    timed steps per run (default 100; 10 warm-up steps come first); no more than one
#              epoch of Fashion-MNIST (60,000 images) holds after the warm-up, but at least 20
#   --batch    the global batch, split over R workers (strong scaling; default 64)
#   --local-batch  per-worker batches, a list: the global batch is B x R (weak scaling, the
#              usual definition of scaling efficiency: samples/s at R / (R x samples/s at R=1)
#              at the same per-worker batch)
#   --compression  gradient wire formats to run, a list of none (exact float32, default), bf16,
#              f16: dtrain's $.strategy.compression; DDP registers fp16_compress_hook for both
#              bf16 and f16 (torch's bf16_compress_hook needs NCCL and gloo cannot reduce
#              bfloat16), the same 2 bytes per gradient. R=1 runs once, uncompressed (nothing to
#              compress), and is every row's baseline
#   --first-bucket-mb  dtrain's $.strategy.first_bucket_mb (default: the spec's, 1 MiB); 25 puts
#              the whole model in one bucket that starts when backward ends
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
# Scaling efficiency = samples/s at R / (R * samples/s at R=1) of the same implementation at the
# same per-worker batch (--local-batch; with --batch, the same global batch), on the same network (R=1 runs on loopback for both networks when 1 is among --workers). Ratio > 1: dtrain
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
LOCAL_BATCHES=""
COMPRESSIONS=none
FIRST_BUCKET=""
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
  --local-batch) LOCAL_BATCHES=${2:?--local-batch needs a value}; shift 2 ;;
  --compression) COMPRESSIONS=${2:?--compression needs a value}; shift 2 ;;
  --first-bucket-mb) FIRST_BUCKET=${2:?--first-bucket-mb needs a value}; shift 2 ;;
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
[[ -z $LOCAL_BATCHES || $LOCAL_BATCHES =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
  die "--local-batch '$LOCAL_BATCHES': use e.g. 32,256,1024"
[[ $COMPRESSIONS =~ ^(none|bf16|f16)(,(none|bf16|f16))*$ ]] ||
  die "--compression '$COMPRESSIONS': a list of none, bf16, f16"
[[ -z $FIRST_BUCKET || $FIRST_BUCKET =~ ^[0-9]+(\.[0-9]+)?$ ]] ||
  die "--first-bucket-mb '$FIRST_BUCKET' must be a number of MiB"
IFS=, read -ra COMP_LIST <<<"$COMPRESSIONS"
if [[ -n $LOCAL_BATCHES ]]; then IFS=, read -ra LB_LIST <<<"$LOCAL_BATCHES"; else LB_LIST=(0); fi
FMNIST_N=60000
case $NET in
loopback) NETS=(loopback) ;;
netns) NETS=(netns) ;;
both) NETS=(loopback netns) ;;
*) die "--net must be loopback, netns or both, got '$NET'" ;;
esac
IFS=, read -ra WORKER_LIST <<<"$WORKERS"
for r in "${WORKER_LIST[@]}"; do
  ((r >= 1 && r <= 16)) || die "workers $r: use 1..16"
  [[ -n $LOCAL_BATCHES ]] || ((BATCH % r == 0)) ||
    die "the global batch $BATCH does not split evenly over $r workers"
done
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
pb_check_dtrain_and_nets

# The run's global batch (GB), warm-up (WU) and timed steps (NS): --steps, but no more than
# an epoch of Fashion-MNIST holds after the warm-up, and at least 20 (a run may then span
# epochs, which bench train times across). set_run R LOCAL_BATCH|0
set_run() {
  local r=$1 lb=$2
  GB=$BATCH
  ((lb == 0)) || GB=$((lb * r))
  ((GB <= FMNIST_N)) || { note "global batch $GB: more than Fashion-MNIST's $FMNIST_N images"; return 1; }
  WU=10 NS=$STEPS
  ((FMNIST_N / GB - WU >= NS)) || NS=$((FMNIST_N / GB - WU))
  ((NS >= 20)) || NS=20
  ((NS <= STEPS)) || NS=$STEPS
}

# run_dtrain NET R OUT COMP: dtrain's figures from the cluster pb_dtrain_up formed.
run_dtrain() {
  local net=$1 r=$2 out=$3 comp=$4 dir=$WORK/dtrain-$1-$2 extra=()
  ((DT_UP)) || return 1
  [[ -z $FIRST_BUCKET ]] || extra+=(--first-bucket-mb "$FIRST_BUCKET")
  pb_on_host "$net" 0 timeout -k 5 "$RUN_TIMEOUT" "$BIN_DIR/dtrain" --addr "$CL_ADDR" \
    --token-file "$CL_TOKEN" bench train --workers "$r" --model "$MODEL" --batch "$GB" \
    --warmup "$WU" --steps "$NS" --compression "$comp" "${extra[@]}" --json \
    >"$out" 2>"$dir/bench.err" </dev/null || {
    note "dtrain ($net, R=$r): $(head -c 300 "$dir/bench.err" | tr '\n' ' ')"
    return 1
  }
}

# run_ddp NET R OUT COMP
run_ddp() {
  local net=$1 r=$2 out=$3 comp=$4 dir=$WORK/ddp-$1-$2-$ROUND master iface=lo i pids=() rc=0
  [[ $comp == none ]] || comp=f16 # fp16_compress_hook: the 16-bit peer (see --compression)
  mkdir -p "$dir"
  if [[ $net == loopback ]]; then master=127.0.0.1:$(pb_free_port); else
    master=$(pb_addr netns 0):29500
    iface=eth0
  fi
  for ((i = 0; i < r; i++)); do
    pb_on_host "$net" "$i" timeout -k 5 "$RUN_TIMEOUT" "$PY" "$ROOT/scripts/bench/ddp_train.py" \
      --rank "$i" --world "$r" --master "$master" --iface "$iface" --steps "$NS" --warmup "$WU" \
      --global-batch "$GB" --compression "$comp" --threads 1 --json >"$dir/rank$i.out" 2>"$dir/rank$i.err" </dev/null &
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
record() { # NET R IMPL ROUND IDLE FILE|- LOCAL_BATCH GLOBAL_BATCH COMP
  "$PY" - "$@" >>"$RESULTS" <<'EOF'
import json, sys
net, r, impl, rnd, idle, f = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]
lb, gb, comp = int(sys.argv[7]), int(sys.argv[8]), sys.argv[9]
rec = {"net": net, "workers": r, "impl": impl, "round": rnd, "idle_pct": int(idle) if idle.isdigit() else None,
       "local_batch": lb if lb else gb // r, "batch": gb, "compression": comp}
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
    sizes="global batch $BATCH"
    [[ -z $LOCAL_BATCHES ]] || sizes="per-worker batch $LOCAL_BATCHES"
    note "$rnet, R=$r: up to $STEPS steps, $sizes, wire $COMPRESSIONS, $ROUNDS round(s)"
    DT_UP=0
    if ((HAVE_DTRAIN)) && pb_dtrain_up "$rnet" "$r" "$WORK/dtrain-$rnet-$r"; then DT_UP=1; fi
    for lb in "${LB_LIST[@]}"; do
      set_run "$r" "$lb" || continue
      for comp in "${COMP_LIST[@]}"; do
        # one worker all-reduces nothing: its run is uncompressed and the baseline of every row
        if ((r == 1)) && [[ $comp != none ]]; then continue; fi
        for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
          for impl in dtrain ddp; do
            f=$WORK/$impl-$rnet-$r-$lb-$comp-$ROUND.json
            have=$HAVE_DTRAIN
            [[ $impl == dtrain ]] || have=$HAVE_TORCH
            idle=-
            ((have == 0)) || idle=$(pb_settle "$SETTLE")
            if ((have)) && "run_$impl" "$rnet" "$r" "$f" "$comp"; then
              record "$rnet" "$r" "$impl" "$ROUND" "$idle" "$f" "$lb" "$GB" "$comp"
            else record "$rnet" "$r" "$impl" "$ROUND" "$idle" - "$lb" "$GB" "$comp"; fi
          done
        done
      done
    done
    ((DT_UP == 0)) || pb_dtrain_down "$rnet" "$WORK/dtrain-$rnet-$r"
    pb_cleanup
  done
done

"$PY" - "$RESULTS" "$JSON" "$RATE" "$(nproc)" "$BATCH" "$LOCAL_BATCHES" <<'EOF'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
as_json, rate, ncpu, batch, weak = sys.argv[2] == "1", sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6] != ""
if as_json:
    print(json.dumps({"rate": rate, "cpus": int(ncpu), "batch": int(batch), "weak_scaling": weak,
                      "runs": runs}))
    sys.exit(0)
# The best round counts (the machine is shared: slower rounds measure the neighbours). Rows are
# keyed by the per-worker batch (weak scaling) or the global batch.
size = (lambda r: r["local_batch"]) if weak else (lambda r: r["batch"])
sps = {}
for r in runs:
    k, v = (r["net"], r["workers"], r["impl"], size(r), r["compression"]), r.get("samples_per_s")
    if v is not None and (sps.get(k) is None or v > sps[k]):
        sps[k] = v
def base(impl, b):
    return sps.get(("loopback", 1, impl, b, "none"))
def cell(v, f="%.1f"):
    return f % v if v is not None else "n/a"
def eff(v, impl, R, b):
    return cell(v / (R * base(impl, b)) * 100, "%.0f%%") if v and base(impl, b) else "n/a"
print("# data-parallel training, fmnist CNN, %s, 1 thread per worker; %s CPUs" %
      ("weak scaling (batch per worker fixed)" if weak else "global batch split over R", ncpu))
nets = sorted({r["net"] for r in runs if r["workers"] > 1}, key=lambda n: n != "loopback") or ["loopback"]
comps = sorted({r["compression"] for r in runs}, key=lambda c: c != "none")
sizes = sorted({size(r) for r in runs})
for net in nets:
    where = "loopback (127.0.0.1)" if net == "loopback" else "netns hosts, %s egress each" % rate
    for comp in comps:
        wire = "float32 gradients" if comp == "none" else "%s gradients (DDP: fp16_compress_hook)" % comp
        print("\n## %s, %s" % (where, wire))
        if weak:
            print("%-6s %-3s %7s %12s %12s %10s %10s %11s" % ("b/wkr", "R", "global", "dtrain s/s",
                  "DDP s/s", "dtrain eff", "DDP eff", "dtrain/DDP"))
        else:
            print("%-3s %12s %12s %10s %10s %13s" % ("R", "dtrain s/s", "DDP s/s", "dtrain eff",
                  "DDP eff", "dtrain/DDP"))
        for b in sizes:
            for R in sorted({r["workers"] for r in runs}):
                n, c = ("loopback", "none") if R == 1 else (net, comp)
                d, t = sps.get((n, R, "dtrain", b, c)), sps.get((n, R, "ddp", b, c))
                if d is None and t is None:
                    continue
                ratio = "%.2fx" % (d / t) if d and t else "n/a"
                if weak:
                    print("%-6d %-3d %7d %12s %12s %10s %10s %11s" % (b, R, b * R, cell(d), cell(t),
                          eff(d, "dtrain", R, b), eff(t, "ddp", R, b), ratio))
                else:
                    print("%-3d %12s %12s %10s %10s %13s" % (R, cell(d), cell(t), eff(d, "dtrain", R, b),
                          eff(t, "ddp", R, b), ratio))
idle = sorted(r["idle_pct"] for r in runs if r.get("idle_pct") is not None)
if idle:
    print("\nCPU idle just before each run: %d%% to %d%% (median %d%%); below ~80%% other work on the "
          "machine skews the figures" % (idle[0], idle[-1], idle[len(idle) // 2]))
failed = sorted({(r["impl"], r["net"], r["workers"], size(r), r["compression"]) for r in runs if "error" in r})
if failed:
    print("\nn/a (no result in some round): " + ", ".join("%s %s R=%d batch %d %s" % f for f in failed))
EOF
