#!/usr/bin/env bash
# allreduce-vs-peers.sh - dtrain's ring all-reduce next to gloo (torch.distributed) and OpenMPI
# (MPI_Allreduce over its TCP transport), same sizes, same world sizes, same wire.
#
#   scripts/bench/allreduce-vs-peers.sh [--sizes 4K,64K,1M,4M,16M,64M] [--worlds 2,3,4] [--iters N]
#       [--net loopback|netns|both] [--rate 1gbit] [--budget S] [--rounds K] [--settle S]
#       [--only dtrain,gloo,mpi] [--warmup-s S] [--tcp-bytes SIZE] [--out DIR] [--json]
#
#   --net      loopback: every rank on 127.0.0.1; netns: each rank on its own scripts/netns-cluster.sh
#              host (own namespace and address, egress shaped to --rate); both (default)
#   --iters    most timed calls per size (default 20); dtrain's bench gets it as its --iters
#   --budget   the peers size their iteration count to about S seconds per size (default 3), at
#              least 3 calls, so 64 MB on a shaped link stays quick
#   --rounds   run dtrain, gloo and MPI in turn K times (default 1); each size's best round counts,
#              since on a shared machine a slow round measures the neighbours
#   --settle   before each run wait up to S seconds (default 30) for the CPUs to be >= 80% idle;
#              the idle share is recorded and the table's footer gives its range
#   --only     run only these implementations (the others print n/a)
#   --warmup-s every implementation makes untimed calls of each size for about S seconds before
#              timing it (default 0.5; 0: 3 calls only). Each run opens fresh TCP connections,
#              and dtrain's reach their steady rate only after a few hundred MB (R=2, loopback,
#              3 warm-up calls then 20 timed: 4 MB at 2.2 GB/s busbw; after 0.5 s of warm-up
#              3.7-3.8), while training keeps one ring for the whole job
#   --tcp-bytes  bytes per transfer of the plain-TCP cost measurement (default 1G; see below)
#   --out      keep every raw JSON result and log in DIR (default: a temporary directory, removed)
#   --json     print one JSON document {"warmup_s", "runs": [{"net","world_size","impl","round",
#              "rows"|"error"}...], "link_check_gbps": {R: Gbit/s}} (every round, raw)
#
# dtrain: R daemons form a cluster (loopback: scripts/local-cluster.sh; netns: one dtraind per host
# with TF_CONFIG), then `dtrain --addr CHIEF bench allreduce --sizes .. --iters N --verify --warmup 3
# --warmup-s S --json` (one checked call and untimed ones per size, as the peers below do). When that
# command fails (not built yet, cluster did not form), dtrain's columns say n/a and the reason goes
# to stderr. gloo: scripts/bench/gloo_allreduce.py, one process per rank (GLOO_SOCKET_IFNAME lo or
# eth0). MPI: build/bench/mpi_allreduce (built from mpi_allreduce.c with mpicc) under mpirun with
# `--mca btl tcp,self`, so it crosses the same TCP wire as the others rather than shared memory;
# on netns hosts mpirun runs on host 0 and starts the other ranks through scripts/bench/netns-rsh.sh
# (ip netns exec in place of ssh).
# busbw = algbw * 2(R-1)/R (nccl-tests). Ratios > 1 mean dtrain is faster.
#
# Two ceilings come with each table, both measured in the same run. The total CPU of a call
# cannot exceed the machine's CPUs times its time, so dtrain's own CPU per rank and call (the
# daemons' every thread) caps its busbw at CPUs * bytes sent per rank / (R * CPU per rank); a
# peer figure above that cap is out of dtrain's reach here unless a call costs less CPU. And
# build/bench/tcp_cost (scripts/bench/tcp_cost.c) measures what plain TCP on loopback costs a
# byte at both ends with no gRPC at all, half the bytes reduced as in a ring: the same formula
# with that cost caps ANY ring over TCP on this machine. Each netns table first
# says what one TCP stream between two hosts carries (a 32 MB transfer), the link's real ceiling.
#
# On loopback, mpirun binds rank I to core I when there are at least as many cores as ranks
# (--report-bindings shows it); dtrain's daemons get the same binding (local-cluster.sh --bind).
#
# Runs as root for netns (namespaces) and lets OpenMPI run as root. Every process it starts is
# stopped on exit (trap), every wait has a timeout, and the namespaces it brought up are removed.
# Environment: DT_NETNS_PREFIX (default dtbench) names the namespaces; DT_BIN_DIR (default ./bin).
set -euo pipefail
PB_NAME=allreduce-vs-peers
# shellcheck source=scripts/bench/peers-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/peers-lib.sh"
PB_BIND=1
cd "$ROOT"
# No OpenMPI process should look for InfiniBand or print help about it.
export OMPI_MCA_btl_base_warn_component_unused=0

SIZES=4K,64K,1M,4M,16M,64M
WORLDS=2,3,4
ITERS=20
NET=both
RATE=1gbit
BUDGET=3
WARMUP_S=0.5
ROUNDS=1
SETTLE=30
ONLY=dtrain,gloo,mpi
OUT=""
TCP_BYTES=1G
JSON=0
RUN_TIMEOUT=${DT_BENCH_RUN_TIMEOUT:-300} # seconds for one implementation at one world size

usage() {
  sed -n '5,7s/^# \{0,1\}//p' "$0" >&2
  exit 2
}

while (($#)); do
  case $1 in
  --sizes) SIZES=${2:?--sizes needs a value}; shift 2 ;;
  --worlds) WORLDS=${2:?--worlds needs a value}; shift 2 ;;
  --iters) ITERS=${2:?--iters needs a value}; shift 2 ;;
  --net) NET=${2:?--net needs a value}; shift 2 ;;
  --rate) RATE=${2:?--rate needs a value}; shift 2 ;;
  --budget) BUDGET=${2:?--budget needs a value}; shift 2 ;;
  --warmup-s) WARMUP_S=${2:?--warmup-s needs a value}; shift 2 ;;
  --rounds) ROUNDS=${2:?--rounds needs a value}; shift 2 ;;
  --settle) SETTLE=${2:?--settle needs a value}; shift 2 ;;
  --only) ONLY=${2:?--only needs a value}; shift 2 ;;
  --out) OUT=${2:?--out needs a value}; shift 2 ;;
  --tcp-bytes) TCP_BYTES=${2:?--tcp-bytes needs a value}; shift 2 ;;
  --json) JSON=1; shift ;;
  -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
  *) note "unknown option '$1'"; usage ;;
  esac
done
[[ $SIZES =~ ^[0-9]+[KMG]?(,[0-9]+[KMG]?)*$ ]] || die "--sizes '$SIZES': use e.g. 4K,64K,1M"
[[ $WORLDS =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--worlds '$WORLDS': use e.g. 2,3,4"
[[ $ITERS =~ ^[1-9][0-9]*$ ]] || die "--iters '$ITERS' must be a positive integer"
[[ $SETTLE =~ ^[0-9]+$ ]] || die "--settle '$SETTLE' must be whole seconds"
[[ $WARMUP_S =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v s="$WARMUP_S" 'BEGIN { exit !(s <= 60) }' ||
  die "--warmup-s '$WARMUP_S' must be 0 to 60 seconds"
[[ $ROUNDS =~ ^[1-9][0-9]?$ ]] || die "--rounds '$ROUNDS' must be 1..99"
[[ $BUDGET =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--budget '$BUDGET' must be seconds"
[[ $TCP_BYTES =~ ^[1-9][0-9]*[KMG]?$ ]] || die "--tcp-bytes '$TCP_BYTES': use e.g. 64M or 1G"
case $NET in
loopback) NETS=(loopback) ;;
netns) NETS=(netns) ;;
both) NETS=(loopback netns) ;;
*) die "--net must be loopback, netns or both, got '$NET'" ;;
esac
IFS=, read -ra WORLD_LIST <<<"$WORLDS"
for r in "${WORLD_LIST[@]}"; do ((r >= 2 && r <= 16)) || die "world size $r: use 2..16"; done

if [[ -n $OUT ]]; then
  mkdir -p "$OUT"
  WORK=$(cd "$OUT" && pwd)
  KEEP_WORK=1
else
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/dt-allreduce-peers.XXXXXX")
fi

# ---- prerequisites -------------------------------------------------------------------------
HAVE_TORCH=0 HAVE_MPI=0 HAVE_DTRAIN=0
if wants gloo; then
  if pb_have_torch; then
    HAVE_TORCH=1
  else note "$PY has no torch with gloo (apt-get install python3-torch): gloo columns n/a"; fi
fi
if wants mpi; then
  if command -v mpirun >/dev/null && command -v mpicc >/dev/null; then
    mkdir -p build/bench
    if [[ ! -x build/bench/mpi_allreduce || scripts/bench/mpi_allreduce.c -nt build/bench/mpi_allreduce ]]; then
      mpicc -O2 -std=c11 -Wall -Wextra -o build/bench/mpi_allreduce scripts/bench/mpi_allreduce.c -lm ||
        die "mpicc failed on scripts/bench/mpi_allreduce.c"
    fi
    HAVE_MPI=1
  else note "no mpirun/mpicc (apt-get install openmpi-bin libopenmpi-dev): MPI columns n/a"; fi
fi
pb_check_dtrain_and_nets
TCP_COST=-
mkdir -p build/bench
if [[ ! -x build/bench/tcp_cost || scripts/bench/tcp_cost.c -nt build/bench/tcp_cost ]]; then
  cc -O2 -std=c11 -Wall -Wextra -o build/bench/tcp_cost scripts/bench/tcp_cost.c ||
    die "cc failed on scripts/bench/tcp_cost.c"
fi

# run_dtrain NET R OUTFILE: dtrain's figures from the cluster pb_dtrain_up formed into OUTFILE
# (JSON), or 1 with the reason on stderr.
run_dtrain() {
  local net=$1 r=$2 out=$3 dir=$WORK/dtrain-$1-$2
  ((DT_UP)) || return 1
  pb_on_host "$net" 0 timeout -k 5 "$RUN_TIMEOUT" "$BIN_DIR/dtrain" --addr "$CL_ADDR" \
    --token-file "$CL_TOKEN" bench allreduce --sizes "$SIZES" --iters "$ITERS" --verify --warmup 3 --warmup-s "$WARMUP_S" --json \
    >"$out" 2>"$dir/bench.err" </dev/null || {
    note "dtrain ($net, R=$r): $(head -c 300 "$dir/bench.err" | tr '\n' ' ')"
    return 1
  }
}

# run_gloo NET R OUTFILE
run_gloo() {
  local net=$1 r=$2 out=$3 dir=$WORK/gloo-$1-$2-$ROUND master iface=lo i pids=() rc=0
  mkdir -p "$dir"
  if [[ $net == loopback ]]; then master=127.0.0.1:$(pb_free_port); else
    master=$(pb_addr netns 0):29500
    iface=eth0
  fi
  for ((i = 0; i < r; i++)); do
    pb_on_host "$net" "$i" timeout -k 5 "$RUN_TIMEOUT" "$PY" "$ROOT/scripts/bench/gloo_allreduce.py" \
      --rank "$i" --world "$r" --master "$master" --iface "$iface" --sizes "$SIZES" \
      --iters "$ITERS" --budget "$BUDGET" --warmup-s "$WARMUP_S" --json >"$dir/rank$i.out" \
      2>"$dir/rank$i.err" </dev/null &
    pids+=($!)
    PIDS+=($!)
  done
  pb_wait_group "${pids[@]}" || rc=1
  if ((rc)); then
    note "gloo ($net, R=$r) failed: $(cat "$dir"/rank*.err | grep -v '^$' | head -n 3 | tr '\n' ' ')"
    return 1
  fi
  cp "$dir/rank0.out" "$out"
}

# run_mpi NET R OUTFILE
run_mpi() {
  local net=$1 r=$2 out=$3 dir=$WORK/mpi-$1-$2-$ROUND
  mkdir -p "$dir"
  pb_mpi_args "$net" "$r" "$dir"
  pb_on_host "$net" 0 timeout -k 5 "$RUN_TIMEOUT" mpirun "${PB_MPI_ARGS[@]}" \
    "$ROOT/build/bench/mpi_allreduce" --sizes "$SIZES" --iters "$ITERS" --budget "$BUDGET" \
    --warmup-s "$WARMUP_S" --json \
    >"$out" 2>"$dir/mpirun.err" </dev/null || {
    note "MPI ($net, R=$r) failed: $(grep -v '^$' "$dir/mpirun.err" | head -n 3 | tr '\n' ' ')"
    return 1
  }
}

# ---- the runs ------------------------------------------------------------------------------
RESULTS=$WORK/results.jsonl
: >"$RESULTS"
# record NET R IMPL ROUND IDLE FILE|-
record() {
  "$PY" - "$@" >>"$RESULTS" <<'EOF'
import json, sys
net, r, impl, rnd, idle, f = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]
rec = {"net": net, "world_size": r, "impl": impl, "round": rnd, "idle_pct": int(idle) if idle.isdigit() else None}
try:
    d = None
    if f != "-":  # one JSON document, pretty or not, possibly after other lines
        text = open(f).read().strip()
        try:
            d = json.loads(text)
        except ValueError:
            d = json.loads(text.splitlines()[-1])
    rec["rows"] = [{k: row[k] for k in ("bytes", "time_s", "algbw_GBps", "busbw_GBps", "cpu_s")
                    if k in row} for row in d["rows"]]
    if d.get("stream_GBps") is not None:  # dtrain: what one raw gRPC stream carries here
        rec["stream_GBps"] = float(d["stream_GBps"])
        rec["stream_bytes"] = int(d["stream_bytes"])
        rec["stream_cpu_s"] = float(d.get("stream_cpu_s", 0))
except Exception as e:
    rec["error"] = "no result" if f == "-" else "unreadable result: %s" % e
print(json.dumps(rec))
EOF
}

# Plain TCP's cost a byte on this machine, once, on a settled machine (the floor for any ring).
pb_settle "$SETTLE" >/dev/null
if timeout -k 5 120 build/bench/tcp_cost --bytes "$TCP_BYTES" --json >"$WORK/tcp_cost.json" 2>"$WORK/tcp_cost.err"; then
  TCP_COST=$WORK/tcp_cost.json
else note "tcp_cost: $(head -c 300 "$WORK/tcp_cost.err" | tr '\n' ' '): no plain-TCP ceiling"; fi

# Per network and world size: one dtrain cluster, then ROUNDS rounds of dtrain, gloo, MPI in turn.
for net in "${NETS[@]}"; do
  for r in "${WORLD_LIST[@]}"; do
    if [[ $net == netns ]]; then
      pb_netns_up "$r" "$RATE"
      link=$(pb_link_check "$r")
      echo "{\"net\": \"netns\", \"world_size\": $r, \"impl\": \"link\", \"gbps\": ${link/n\/a/null}}" >>"$RESULTS"
    fi
    note "$net, R=$r: sizes $SIZES, $ROUNDS round(s)"
    DT_UP=0
    if ((HAVE_DTRAIN)) && pb_dtrain_up "$net" "$r" "$WORK/dtrain-$net-$r"; then DT_UP=1; fi
    for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
      for impl in dtrain gloo mpi; do
        f=$WORK/$impl-$net-$r-$ROUND.json
        have=0
        case $impl in dtrain) have=$HAVE_DTRAIN ;; gloo) have=$HAVE_TORCH ;; mpi) have=$HAVE_MPI ;; esac
        idle=-
        ((have == 0)) || idle=$(pb_settle "$SETTLE")
        if ((have)) && "run_$impl" "$net" "$r" "$f"; then
          record "$net" "$r" "$impl" "$ROUND" "$idle" "$f"
        else record "$net" "$r" "$impl" "$ROUND" "$idle" -; fi
      done
    done
    ((DT_UP == 0)) || pb_dtrain_down "$net" "$WORK/dtrain-$net-$r"
    pb_cleanup
  done
done

# ---- the report ----------------------------------------------------------------------------
"$PY" - "$RESULTS" "$JSON" "$RATE" "$(nproc)" "$TCP_COST" "$WARMUP_S" <<'EOF'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tcp = json.load(open(sys.argv[5])) if sys.argv[5] != "-" else None
links = {r["world_size"]: r["gbps"] for r in runs if r["impl"] == "link"}
runs = [r for r in runs if r["impl"] != "link"]
as_json, rate, ncpu = sys.argv[2] == "1", sys.argv[3], sys.argv[4]
if as_json:
    print(json.dumps({"rate": rate, "cpus": int(ncpu), "warmup_s": float(sys.argv[6]),
                      "link_check_gbps": links, "tcp_cost": tcp, "runs": runs}))
    sys.exit(0)
units = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
link_gbps = next((float(rate[:-len(u)]) * units[u] / 1e9 for u in ("kbit", "mbit", "gbit", "bit")
                  if rate.lower().endswith(u) and rate[:-len(u)].replace(".", "").isdigit()), None)
# The best round of each size counts (the machine is shared: slower rounds measure the neighbours).
by = {}
for r in runs:
    d = by.setdefault((r["net"], r["world_size"], r["impl"]), {})
    for row in r.get("rows", []):
        if row["bytes"] not in d or row["time_s"] < d[row["bytes"]]["time_s"]:
            d[row["bytes"]] = row
def fmt_size(b):
    for u, s in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if b >= u and b % u == 0:
            return "%d%sB" % (b // u, s)
    return "%dB" % b
def cell(v, f="%.3f"):
    return f % v if v is not None else "n/a"
def ratio(a, b):
    return "%.2fx" % (a / b) if a is not None and b else "n/a"
keys = sorted({(r["net"], r["world_size"]) for r in runs}, key=lambda k: (k[0] != "loopback", k[1]))
print("# all-reduce, float32 sum: bus bandwidth in GB/s (busbw = algbw * 2(R-1)/R); %s CPUs; "
      "%s s of warm-up calls per size" % (ncpu, sys.argv[6]))
for net, R in keys:
    rows = sorted(set().union(*(by[(net, R, i)].keys() for i in ("dtrain", "gloo", "mpi"))))
    where = "loopback (127.0.0.1)" if net == "loopback" else "netns hosts, %s egress each" % rate
    print("\n## %s, R=%d" % (where, R))
    if net == "netns":
        print("link check: one TCP stream host 1 -> host 0 carries %s Gbit/s of payload"
              % cell(links.get(R), "%.3f"))
    hdr = "%-6s %10s %10s %10s %12s %12s" % ("size", "dtrain", "gloo", "MPI", "dtrain/gloo", "dtrain/MPI")
    if net == "netns" and link_gbps:
        hdr += " %14s" % "dtrain % link"
    print(hdr)
    for b in rows:
        v = {i: by[(net, R, i)].get(b, {}).get("busbw_GBps") for i in ("dtrain", "gloo", "mpi")}
        line = "%-6s %10s %10s %10s %12s %12s" % (fmt_size(b), cell(v["dtrain"]), cell(v["gloo"]),
                                                  cell(v["mpi"]), ratio(v["dtrain"], v["gloo"]),
                                                  ratio(v["dtrain"], v["mpi"]))
        if net == "netns" and link_gbps:
            line += " %14s" % (cell(v["dtrain"] * 8 / link_gbps * 100, "%.0f%%") if v["dtrain"] else "n/a")
        print(line)
    # CPU per rank and call (every thread, user + system) of the same best rows: what the
    # collective takes from compute that would run beside it.
    print("CPU per rank, ms a call: %s" % "; ".join(
        "%s %s" % (fmt_size(b), "/".join(cell(by[(net, R, i)].get(b, {}).get("cpu_s") and
                                              by[(net, R, i)][b]["cpu_s"] * 1e3, "%.2f")
                                         for i in ("dtrain", "gloo", "mpi"))) for b in rows)
          + " (dtrain/gloo/MPI)")
    # The CPU ceiling: sum of the ranks' CPU <= CPUs x time, so busbw <= CPUs x (bytes a rank
    # sends) / (R x CPU per rank). MPI figures above it need a call that costs dtrain less CPU.
    ncpus = int(ncpu)
    def cap(b):
        c = by[(net, R, "dtrain")].get(b, {}).get("cpu_s")
        return ncpus * b * 2 * (R - 1) / R / (R * c) / 1e9 if c else None
    caps = {b: cap(b) for b in rows}
    if any(caps.values()):
        over = [fmt_size(b) for b in rows if caps[b] and
                (by[(net, R, "mpi")].get(b, {}).get("busbw_GBps") or 0) > caps[b]]
        print("dtrain's busbw ceiling from its own CPU (%d CPUs, R=%d): %s%s" % (
            ncpus, R, "; ".join("%s %s" % (fmt_size(b), cell(caps[b])) for b in rows if caps[b]),
            "; MPI is above it at " + ", ".join(over) if over else "; MPI is below it everywhere"))
    streams = [r for r in runs if (r["net"], r["world_size"], r["impl"]) == (net, R, "dtrain")
               and r.get("stream_GBps")]
    big = max(rows) if rows else None
    if streams and big and by[(net, R, "dtrain")].get(big):
        st = max(streams, key=lambda r: r["stream_GBps"])
        # Each rank sends busbw's worth through one stream to its ring neighbour.
        print("one raw gRPC stream: %.3f GB/s; dtrain busbw at %s is %.0f%% of it" % (
            st["stream_GBps"], fmt_size(big), 100 * by[(net, R, "dtrain")][big]["busbw_GBps"] / st["stream_GBps"]))
        if st.get("stream_cpu_s") and st.get("stream_bytes"):
            print("  the stream's CPU, both ends: %.2f ns a byte; the ring's, all ranks: %.2f ns a byte sent"
                  % (st["stream_cpu_s"] * 1e9 / st["stream_bytes"],
                     by[(net, R, "dtrain")][big].get("cpu_s", 0) * R * 1e9 / (big * 2 * (R - 1))))
        # On shaped links the stream is the link's, so a CPU share of it says nothing there.
        if caps.get(big) and net == "loopback":
            print("  on %d CPUs dtrain's own CPU caps busbw at %s at %s: %.0f%% of the stream"
                  % (ncpus, cell(caps[big]), fmt_size(big), 100 * caps[big] / st["stream_GBps"]))
        if tcp and tcp.get("ring_floor_ns_per_byte") and net == "loopback":
            f = tcp["ring_floor_ns_per_byte"]
            any_cap = ncpus / (R * f)
            print("  plain TCP here costs %.3f ns a byte sent (no gRPC; half reduced): any ring over "
                  "TCP of R=%d on %d CPUs tops out at %.3f GB/s, %.0f%% of the stream"
                  % (f, R, ncpus, any_cap, 100 * any_cap / st["stream_GBps"]))
    small = min(rows) if rows else None
    if small is not None:
        t = {i: by[(net, R, i)].get(small, {}).get("time_s") for i in ("dtrain", "gloo", "mpi")}
        us = lambda x: cell(x * 1e6 if x else None, "%.0f")
        print("latency %s: dtrain %s us, gloo %s us, MPI %s us; time ratio (lower is better) "
              "dtrain/gloo %s, dtrain/MPI %s"
              % (fmt_size(small), us(t["dtrain"]), us(t["gloo"]), us(t["mpi"]),
                 ratio(t["dtrain"], t["gloo"]), ratio(t["dtrain"], t["mpi"])))
idle = sorted(r["idle_pct"] for r in runs if r.get("idle_pct") is not None)
if idle:
    print("\nCPU idle just before each run: %d%% to %d%% (median %d%%); below ~80%% other work on the "
          "machine skews the figures" % (idle[0], idle[-1], idle[len(idle) // 2]))
failed = sorted({(r["impl"], r["net"], r["world_size"]) for r in runs if "error" in r})
if failed:
    print("\nn/a (no result in some round): " + ", ".join("%s %s R=%d" % f for f in failed))
EOF
