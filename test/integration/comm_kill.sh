#!/usr/bin/env bash
# timeout: 120
# Three daemons on loopback run `dtrain bench allreduce --verify` (exact sums, same bits); then a
# kill -9 of worker:2 during 64 MB all-reduces makes the others fail naming worker:2 within 5 s,
# the survivors stay up, and once worker:2 is restarted the group all-reduces again.
source "$(dirname "$0")/lib.sh"

mapfile -t ports < <(dt_free_ports 3)
addrs=("127.0.0.1:${ports[0]}" "127.0.0.1:${ports[1]}" "127.0.0.1:${ports[2]}")
start() { dt_start_daemon "$1" TF_CONFIG="$(dt_tfconfig_workers "$2" "${addrs[@]}")" -- --ready-file "$DT_TEST_TMP/$1.ready"; }
for i in 0 1 2; do start "w$i" "$i"; done
for i in 0 1 2; do dt_wait_file "$DT_TEST_TMP/w$i.ready" --timeout 20 || dt_fail "worker:$i never formed"; done
bench() { "$DT_BIN_DIR/dtrain" bench allreduce --addr "${addrs[0]}" "$@"; }

# 0. bad input is refused (exit 2) with the option named.
for bad in "--sizes 4X" "--sizes ," "--wire f64" "--iters 0" "--streams 99" "--warmup-s 61" "--warmup-s -1" "--warmup-s 0.5s" "--warmup-s nan"; do
  # shellcheck disable=SC2086
  if bench $bad >"$DT_TEST_TMP/bad" 2>&1; then dt_fail "bench $bad was accepted"; else rc=$?; fi
  dt_assert_eq "$rc" 2 "exit status of bench $bad"
done
dt_assert_contains "$DT_TEST_TMP/bad" "streams" "the error names the option"
for bad in "--devices 0" "--devices 17" "--devices 2x" "--devices 2 --wire bf16"; do
  # shellcheck disable=SC2086
  if bench $bad >"$DT_TEST_TMP/bad" 2>&1; then dt_fail "bench $bad was accepted"; else rc=$?; fi
  dt_assert_eq "$rc" 2 "exit status of bench $bad"
  dt_assert_contains "$DT_TEST_TMP/bad" "devices" "the error for $bad names --devices"
done

# 1. exact results, bf16 wire too; JSON keys as DESIGN.md says.
bench --verify --sizes 0,4,28,4092,12004,4M --iters 2 --no-stream --json >"$DT_TEST_TMP/v.json" || dt_fail "bench --verify failed"
dt_assert_eq "$(dt_json_get world_size "$DT_TEST_TMP/v.json")" 3 "world_size"
dt_assert_eq "$(dt_json_get rows.5.bytes "$DT_TEST_TMP/v.json")" 4194304 "rows.5.bytes"
dt_assert_eq "$(dt_json_get rows.5.verified "$DT_TEST_TMP/v.json")" true "rows.5.verified"
dt_json_get rows.5.busbw_GBps "$DT_TEST_TMP/v.json" >/dev/null || dt_fail "no busbw_GBps"
# The daemons' CPU per all-reduce: a 4 MB one moves megabytes through the kernel on every rank.
cpu=$(dt_json_get rows.5.cpu_s "$DT_TEST_TMP/v.json") || dt_fail "no cpu_s"
python3 -c "import sys; c = float(sys.argv[1]); sys.exit(not 1e-5 < c < 10)" "$cpu" || dt_fail "cpu_s $cpu for 4 MB"
# --warmup-s: every rank agrees on how many untimed calls fill the time (a disagreement would
# leave one rank waiting in a collective the others never make, and time out).
t0=$(dt__now_ms)
bench --verify --sizes 64K,1M --iters 2 --warmup 1 --warmup-s 0.3 --json >"$DT_TEST_TMP/w.json" || dt_fail "bench --warmup-s failed"
ms=$(($(dt__now_ms) - t0))
echo "bench --warmup-s 0.3, 2 sizes and the raw stream: $ms ms"
((ms >= 900)) || dt_fail "--warmup-s 0.3 over 2 sizes and the raw stream took only $ms ms"
dt_assert_eq "$(dt_json_get warmup_s "$DT_TEST_TMP/w.json")" 0.3 "warmup_s in the JSON"
dt_assert_eq "$(dt_json_get rows.1.verified "$DT_TEST_TMP/w.json")" true "rows.1.verified after a timed warm-up"
bench --verify --wire bf16 --sizes 1M --iters 1 --no-stream >"$DT_TEST_TMP/bf16.txt" || dt_fail "bf16 verify failed"
dt_assert_contains "$DT_TEST_TMP/bf16.txt" "yes" "bf16 verified"
dt_assert_contains "$DT_TEST_TMP/bf16.txt" "cpu/rank\(ms\)  verified$" "the table's CPU column"
dt_assert_contains "$DT_TEST_TMP/bf16.txt" "^ +1M( +[0-9]+\.[0-9]{3}){4}  yes$" "the 1M row"

# 1b. --devices: the hierarchical all-reduce, 3 daemons x 2 and x 3 CPU replicas (in-host
# reduce-scatter, a host ring per replica index, in-host all-gather), exact sums and one set of
# bits on every replica (sizes 0, 1, G-1, G*k+1 and 4 MB), next to the flat ring's rows.
bench --devices 2 --verify --sizes 0,4,4004,4M --iters 2 --warmup-s 0 --no-stream --json >"$DT_TEST_TMP/h.json" ||
  dt_fail "bench --devices 2 --verify failed: $(cat "$DT_TEST_TMP/h.json")"
dt_assert_eq "$(dt_json_get devices "$DT_TEST_TMP/h.json")" 2 "devices"
dt_assert_eq "$(dt_json_get replicas "$DT_TEST_TMP/h.json")" 6 "replicas: 3 daemons x 2"
python3 - "$DT_TEST_TMP/h.json" <<'PY' || dt_fail "the hierarchical rows are not sane"
import json, sys
j = json.load(open(sys.argv[1]))
rows, hier = j["rows"], j["hier_rows"]
assert [r["bytes"] for r in hier] == [0, 4, 4004, 4 << 20], hier
for r, f in zip(hier, rows):
    assert r["verified"] is True, r
    assert r["flat_time_s"] == f["time_s"], (r, f)
    assert r["time_s"] > 0 and r["cpu_s"] > 0, r
    # nccl-tests' busbw over all 6 replicas, not over the 3 daemons
    assert abs(r["busbw_GBps"] - r["algbw_GBps"] * 2 * 5 / 6) <= 1e-9 * r["algbw_GBps"] + 1e-15, r
    assert abs(r["algbw_GBps"] - r["bytes"] / r["time_s"] / 1e9) <= 1e-9 * r["algbw_GBps"] + 1e-15, r
big = hier[3]
print("4 MB, 3 daemons x 2 replicas: %.2f ms, busbw %.3f GB/s (flat ring over 3 daemons: %.2f ms)"
      % (big["time_s"] * 1e3, big["busbw_GBps"], big["flat_time_s"] * 1e3))
PY
bench --devices 3 --verify --sizes 8,4,12004,1M --iters 1 --warmup-s 0.1 --no-stream >"$DT_TEST_TMP/h3.txt" ||
  dt_fail "bench --devices 3 --verify failed: $(cat "$DT_TEST_TMP/h3.txt")"
cat "$DT_TEST_TMP/h3.txt"
dt_assert_contains "$DT_TEST_TMP/h3.txt" "^hierarchical all-reduce, 3 ranks x 3 CPU replicas \(9 replicas" "the hierarchical table's title"
dt_assert_eq "$(grep -cE "^ +(8|4|12004|1M)( +[0-9]+\.[0-9]{3}){5}  yes$" "$DT_TEST_TMP/h3.txt")" 4 "verified hierarchical rows"

# 2. kill -9 worker:2 in the middle of 64 MB all-reduces.
bench --sizes 64M --iters 1000 --warmup 0 --no-stream >"$DT_TEST_TMP/kill.out" 2>&1 &
cli=$!
dt_wait_for grep -q "bench session" "$DT_TEST_TMP/w2.log" --timeout 20 || dt_fail "the bench never started on worker:2"
sleep 1
t0=$(dt__now_ms)
kill -9 "$(dt_daemon_pid w2)"
dt_wait_for dt__gone "$cli" --timeout 5 || dt_fail "the bench did not end within 5 s of the kill"
ms=$(($(dt__now_ms) - t0))
wait "$cli" && rc=0 || rc=$?
cat "$DT_TEST_TMP/kill.out"
echo "the bench failed ${ms} ms after the kill (exit $rc)"
((rc == 1)) || dt_fail "bench exit status $rc, want 1"
((ms < 5000)) || dt_fail "took ${ms} ms"
dt_assert_contains "$DT_TEST_TMP/kill.out" "worker:2" "the CLI's error names the dead task"
for i in 0 1; do
  dt_assert_contains "$DT_TEST_TMP/w$i.log" "worker:2 at ${addrs[2]}" "worker:$i's comm error"
  kill -0 "$(dt_daemon_pid "w$i")" || dt_fail "worker:$i died with its peer"
done

# 3. restart worker:2: a new group works.
start w2b 2
dt_wait_file "$DT_TEST_TMP/w2b.ready" --timeout 20 || dt_fail "restarted worker:2 never rejoined"
small() { bench --verify --sizes 64K --iters 1 --no-stream; }
dt_wait_for small --timeout 30 || dt_fail "no all-reduce after worker:2 came back"
bench --verify --sizes 1M,4M --iters 2 --no-stream || dt_fail "bench after the restart failed"
echo PASS
