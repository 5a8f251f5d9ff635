#!/usr/bin/env bash
# timeout: 180
# The peer benchmarks at their smallest: allreduce-vs-peers.sh (R=2, 4 KB, 2 iterations) on
# loopback and, as root, MPI on two shaped netns hosts (mpirun reaching host 1 through
# netns-rsh.sh), and train-vs-ddp.sh (R=1 and 2, 2 steps) on loopback. The tables print with figures from gloo, MPI and
# DDP (dtrain's columns may say n/a until its benchmarks exist); --json parses; bad options exit 2;
# nothing the scripts started is left running and no namespace is left behind.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
if [[ ! -x $PY ]] || ! "$PY" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)'; then
  dt_skip "no torch in $PY (apt-get install python3-torch)"
fi
dt_require_cmd mpirun mpicc
B=$DT_SRC_DIR/scripts/bench
# Private namespaces, of the name lib.sh sweeps if this test is SIGKILLed.
export DT_NETNS_PREFIX=dtt$$ DT_NETNS_SUBNET=10.78.$(($$ % 250))
# A stuck peer process fails its run after 60 s (the scripts' default is 300), inside the watchdog.
export DT_BENCH_RUN_TIMEOUT=60
dt_on_exit "'$DT_NETNS' down >/dev/null 2>&1"

# --- bad options are refused before anything starts ---
for bad in "--sizes 3K,x" "--worlds 1" "--net wan" "--iters 0" "--tcp-bytes 0" "--tcp-bytes 1T" "--warmup-s 61" "--warmup-s x" "--bogus"; do
  # shellcheck disable=SC2086  # $bad is several words
  if "$B/allreduce-vs-peers.sh" $bad >"$DT_TEST_TMP/bad.out" 2>&1; then dt_fail "allreduce-vs-peers.sh $bad succeeded"; fi
done
if "$B/train-vs-ddp.sh" --workers 3 --batch 64 >"$DT_TEST_TMP/bad.out" 2>&1; then
  dt_fail "train-vs-ddp.sh accepted a batch of 64 over 3 workers"
fi
dt_assert_contains "$DT_TEST_TMP/bad.out" "does not split evenly" "uneven batch refusal"

# --- all-reduce on loopback: the table, with the raw results kept (--out) ---
t0=$(dt__now_ms)
"$B/allreduce-vs-peers.sh" --sizes 4K --worlds 2 --iters 2 --budget 0.1 --warmup-s 0.05 --settle 0 --tcp-bytes 16M --net loopback --out "$DT_TEST_TMP/ar" \
  >"$DT_TEST_TMP/ar.txt" 2>"$DT_TEST_TMP/ar.err" || { cat "$DT_TEST_TMP/ar.err" >&2; dt_fail "allreduce-vs-peers.sh failed"; }
echo "allreduce-vs-peers.sh --net loopback: $(($(dt__now_ms) - t0)) ms"
cat "$DT_TEST_TMP/ar.txt"
dt_assert_contains "$DT_TEST_TMP/ar.txt" "^## loopback \(127.0.0.1\), R=2$" "loopback table"
dt_assert_contains "$DT_TEST_TMP/ar.txt" "; 0.05 s of warm-up calls per size$" "the warm-up in the header"
# size, dtrain (a figure or n/a), gloo and MPI figures, two ratios
dt_assert_contains "$DT_TEST_TMP/ar.txt" '^4KB +(n/a|[0-9.]+) +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +(n/a|[0-9.]+x) +(n/a|[0-9.]+x)$' "4KB row"
dt_assert_contains "$DT_TEST_TMP/ar.txt" '^CPU per rank, ms a call: 4KB (n/a|[0-9.]+)/[0-9]+\.[0-9]+/[0-9]+\.[0-9]+ \(dtrain/gloo/MPI\)$' "CPU line"
dt_assert_contains "$DT_TEST_TMP/ar.txt" "^latency 4KB: dtrain .* us, gloo [0-9]+ us, MPI [0-9]+ us; time ratio \(lower is better\) dtrain/gloo (n/a|[0-9.]+x), dtrain/MPI" "latency line"
# With dtrain's figures come its CPU ceiling, and plain TCP's (build/bench/tcp_cost) under the stream.
if grep -Eq '^4KB +[0-9.]+ ' "$DT_TEST_TMP/ar.txt"; then
  dt_assert_contains "$DT_TEST_TMP/ar.txt" "^dtrain's busbw ceiling from its own CPU \([0-9]+ CPUs, R=2\): 4KB [0-9]+\.[0-9]+; MPI is (above it at 4KB|below it everywhere)$" "CPU ceiling line"
  dt_assert_contains "$DT_TEST_TMP/ar.txt" "^  plain TCP here costs [0-9]+\.[0-9]+ ns a byte sent \(no gRPC; half reduced\): any ring over TCP of R=2 on [0-9]+ CPUs tops out at [0-9]+\.[0-9]+ GB/s, [0-9]+% of the stream$" "plain TCP line"
fi
# The plain-TCP tool on its own: bad input is refused, a small run gives positive costs.
"$DT_SRC_DIR/build/bench/tcp_cost" --sizes 3 >/dev/null 2>&1 && dt_fail "tcp_cost took a 3-byte message"
"$DT_SRC_DIR/build/bench/tcp_cost" --bytes 5G >/dev/null 2>&1 && dt_fail "tcp_cost took --bytes 5G"
"$DT_SRC_DIR/build/bench/tcp_cost" --sizes 64K,1M --bytes 8M --repeat 1 >"$DT_TEST_TMP/tcp.txt" || dt_fail "tcp_cost failed"
dt_assert_contains "$DT_TEST_TMP/tcp.txt" "^1048576 +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+$" "tcp_cost row"

# --- all-reduce on two shaped netns hosts, as JSON: MPI only (mpirun reaches host 1 through
# netns-rsh.sh; gloo's torch import would double the time) ---
if [[ $(id -u) -eq 0 ]]; then
  net=netns
  t0=$(dt__now_ms)
  "$B/allreduce-vs-peers.sh" --sizes 4K,8K --worlds 2 --iters 2 --budget 0.1 --warmup-s 0 --settle 0 --tcp-bytes 16M --net netns --only mpi --json \
    >"$DT_TEST_TMP/ar.json" 2>"$DT_TEST_TMP/ar-json.err" || { cat "$DT_TEST_TMP/ar-json.err" >&2; dt_fail "allreduce-vs-peers.sh --net netns --json failed"; }
  echo "allreduce-vs-peers.sh --net netns --only mpi: $(($(dt__now_ms) - t0)) ms"
else
  net=loopback
  echo "not root: the netns run is left out"
  "$B/allreduce-vs-peers.sh" --sizes 4K,8K --worlds 2 --iters 2 --budget 0.1 --warmup-s 0 --settle 0 --tcp-bytes 16M --net loopback --only mpi --json \
    >"$DT_TEST_TMP/ar.json" 2>"$DT_TEST_TMP/ar-json.err" || dt_fail "allreduce-vs-peers.sh --json failed"
fi
"$PY" - "$DT_TEST_TMP/ar.json" "$DT_TEST_TMP/ar/results.jsonl" "$net" <<'EOF' || dt_fail "allreduce-vs-peers.sh: wrong results"
import json, sys
d = json.load(open(sys.argv[1]))
net = sys.argv[3]
runs = {r["impl"]: r for r in d["runs"]}
assert d["warmup_s"] == 0, d["warmup_s"]
assert set(runs) == {"dtrain", "gloo", "mpi"}, runs
assert all(r["net"] == net and r["world_size"] == 2 for r in d["runs"]), d["runs"]
assert "error" in runs["dtrain"] and "error" in runs["gloo"], "ran despite --only mpi"
t = d["tcp_cost"]  # plain TCP's cost a byte, measured once per run
assert [r["bytes"] for r in t["rows"]] == [262144, 524288, 1048576, 4194304], t
assert all(0 < r["copy_ns_per_byte"] < 100 and 0 < r["reduce_ns_per_byte"] < 100 for r in t["rows"]), t
# the floor is the cheapest size's mean of the two (each printed to 4 decimals)
assert abs(min((r["copy_ns_per_byte"] + r["reduce_ns_per_byte"]) / 2 for r in t["rows"])
           - t["ring_floor_ns_per_byte"]) < 2e-4, t
if net == "netns":  # the shaped link carried something, and no more than 1 Gbit/s (+10%)
    g = d["link_check_gbps"]["2"]
    assert g is not None and 0.05 < g < 1.1, g
kept = [json.loads(l) for l in open(sys.argv[2])]
for rows, sizes in [(runs["mpi"]["rows"], [4096, 8192])] + [
        (r["rows"], [4096]) for r in kept if r["impl"] in ("gloo", "mpi")]:
    assert [r["bytes"] for r in rows] == sizes, rows
    for r in rows:
        assert r["time_s"] > 0 and abs(r["busbw_GBps"] - r["algbw_GBps"]) < 1e-9, r  # R=2: equal
        assert 0 < r["cpu_s"] < 10, r
EOF

# --- training: DDP figures for R=1 and 2; efficiency and ratio columns ---
"$B/train-vs-ddp.sh" --workers 1,2 --steps 2 --rounds 1 --settle 0 --net loopback >"$DT_TEST_TMP/tr.txt" 2>"$DT_TEST_TMP/tr.err" ||
  { cat "$DT_TEST_TMP/tr.err" >&2; dt_fail "train-vs-ddp.sh failed"; }
cat "$DT_TEST_TMP/tr.txt"
dt_assert_contains "$DT_TEST_TMP/tr.txt" "^R +dtrain s/s +DDP s/s +dtrain eff +DDP eff +dtrain/DDP$" "training table header"
dt_assert_contains "$DT_TEST_TMP/tr.txt" "^1 +(n/a|[0-9.]+) +[0-9]+\.[0-9] +(n/a|100%) +100% " "R=1 row"
dt_assert_contains "$DT_TEST_TMP/tr.txt" "^2 +(n/a|[0-9.]+) +[0-9]+\.[0-9] +(n/a|[0-9]+%) +[0-9]+% " "R=2 row"

# --- nothing left behind ---
left=$(ip netns list 2>/dev/null | grep -c "^$DT_NETNS_PREFIX-" || true)
dt_assert_eq "$left" 0 "namespaces left behind"
for p in gloo_allreduce.py ddp_train.py mpi_allreduce; do
  if pgrep -f "$DT_SRC_DIR/.*$p" >/dev/null; then dt_fail "a $p process outlived its script"; fi
done
echo PASS
