#!/usr/bin/env bash
# timeout: 180
# Several CPU replicas in one daemon ($.strategy.devices): a job on 1 daemon with 2 replicas
# computes what the same job computes on 2 daemons with one each (the same global batch, DATA
# sharding, no shuffle): the same final weights hash, the same examples. And 2 daemons x 2
# replicas (the hierarchical all-reduce: in-host reduce-scatter, a host ring per replica index,
# in-host all-gather) train to one hash on both daemons, and follow the 1-daemon x 4-replica and
# the 1-replica runs epoch by epoch (the same steps up to float32 reassociation). The step-phase
# log of a multi-replica job gives the in-host all-reduce and host-ring times.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

# check_phases LOG RING: every step-phase line of LOG has the in-host and host-ring times, each
# within the step (they run inside its forward+backward and wait); RING: "ring" when the job
# spans daemons (host ring time > 0: a loopback round trip at least), "none" on one daemon (0).
# (The in-host passes over this model's 10 KB of gradients may round to 0.000 ms.)
check_phases() {
  /usr/bin/python3 - "$1" "$2" <<'PY' || dt_fail "the step-phase log of $1"
import re, sys
pat = re.compile(r"epoch \d+: ([0-9.]+) ms/step over (\d+) steps: data ([0-9.]+), forward\+backward "
                 r"([0-9.]+), all-reduce wait after backward ([0-9.]+) .*; in-host all-reduce "
                 r"([0-9.]+) ms/step, host ring ([0-9.]+) ms/step$")
lines = [l.rstrip() for l in open(sys.argv[1]) if "ms/step over" in l]
assert lines, "no step-phase line"
for l in lines:
    m = pat.search(l)
    assert m, l
    step, n, data, comp, wait, inhost, ring = map(float, m.groups())
    assert n >= 1 and inhost >= 0, l
    assert (ring > 0) if sys.argv[2] == "ring" else (ring == 0), l
    # 0.02: each figure is rounded to 0.01 ms in the log
    assert inhost + ring <= comp + wait + 0.02 and comp + wait <= step + 0.02, l
print("%s: %s" % (sys.argv[1].rsplit("/", 1)[-1], lines[-1].split("train: ", 1)[-1]))
PY
}

jobs_data
jobs_spec "$DT_TEST_TMP/flat.json" 2 32
jobs_spec "$DT_TEST_TMP/two_cpus.json" 2 32 ', "strategy": {"devices": ["/cpu:0", "/cpu:1"]}'
jobs_spec "$DT_TEST_TMP/long.json" 100000 32 ', "strategy": {"devices": ["/cpu:0", "/cpu:1"]}, "checkpoint": {"save_freq": 100000000}, "fault_tolerance": {"max_restarts": 0}'

# The reference: 2 daemons, one replica each.
jobs_daemons 2 ref
t0=$(dt__now_ms)
jc submit "$DT_TEST_TMP/flat.json" --watch --json >"$DT_TEST_TMP/ref.jsonl" ||
  dt_fail "the 2-daemon job did not succeed: $(tail -1 "$DT_TEST_TMP/ref.jsonl")"
echo "2 daemons x 1 replica: $(ms_since "$t0") ms"
jc status 1 --json >"$DT_TEST_TMP/ref.json"
ref=$(dt_json_get weights_hashes.0 "$DT_TEST_TMP/ref.json")
[[ -n $ref ]] || dt_fail "the reference run reported no weights hash"
dt_assert_eq "$(dt_json_get examples "$DT_TEST_TMP/ref.json")" 512 "the reference's examples"
dt_stop_daemon ref-w1
dt_stop_daemon ref-w0

# 1 daemon, 2 CPU replicas: the same steps, so the same weights.
jobs_daemons 1 one
# A global batch that does not divide among the daemon's 2 replicas: refused at submit (exit 2).
jobs_spec "$DT_TEST_TMP/odd.json" 2 33 ', "strategy": {"devices": ["/cpu:0", "/cpu:1"]}'
rc=0
jc submit "$DT_TEST_TMP/odd.json" >/dev/null 2>"$DT_TEST_TMP/odd.err" || rc=$?
dt_assert_eq "$rc" 2 "batch 33 on 1 daemon x 2 replicas"
dt_assert_contains "$DT_TEST_TMP/odd.err" '\$\.fit\.batch_size: 33 .* 2 replicas' "the batch refusal"
t0=$(dt__now_ms)
jc submit "$DT_TEST_TMP/two_cpus.json" --watch --json >"$DT_TEST_TMP/one.jsonl" ||
  dt_fail "the 2-replica job did not succeed: $(tail -1 "$DT_TEST_TMP/one.jsonl")"
echo "1 daemon x 2 replicas: $(ms_since "$t0") ms"
jc status 1 --json >"$DT_TEST_TMP/one.json"
dt_assert_eq "$(dt_json_get examples "$DT_TEST_TMP/one.json")" 512 "examples over both replicas"
dt_assert_eq "$(dt_json_get weights_hashes.0 "$DT_TEST_TMP/one.json")" "$ref" \
  "1 daemon x 2 replicas against 2 daemons x 1: final weights hash"
dt_assert_contains "$DT_TEST_TMP/one-w0.log" "rank 0 trains 2 CPU replicas .global ranks 0\\.\\.1 of 2" \
  "the daemon ran two replicas"
check_phases "$DT_TEST_TMP/one-w0.log" none # before a 1-replica job adds lines without them
# One replica on the same daemon sums each gradient over 32 examples rather than 16 + 16: the
# same steps up to float reassociation, so (almost surely) other bits. Shown, not asserted.
jc submit "$DT_TEST_TMP/flat.json" --watch --json >"$DT_TEST_TMP/single.jsonl" || dt_fail "the 1-replica job"
echo "1 daemon x 1 replica: $(jc status 2 --json | dt_json_get weights_hashes.0) (2 replicas: $ref)"
# 1 daemon, 4 CPU replicas: the reference for 2 daemons x 2 below.
jobs_spec "$DT_TEST_TMP/four.json" 2 32 ', "strategy": {"devices": ["/cpu:0", "/cpu:1", "/cpu:2", "/cpu:3"]}'
jc submit "$DT_TEST_TMP/four.json" --watch --json >"$DT_TEST_TMP/four.jsonl" ||
  dt_fail "the 4-replica job did not succeed: $(tail -1 "$DT_TEST_TMP/four.jsonl")"
jc status 3 --json >"$DT_TEST_TMP/four.json.status"
dt_assert_eq "$(dt_json_get examples "$DT_TEST_TMP/four.json.status")" 512 "examples over 4 replicas on 1 daemon"
four=$(dt_json_get weights_hashes.0 "$DT_TEST_TMP/four.json.status")
dt_stop_daemon one-w0

# 2 daemons x 2 replicas: the hierarchical path end to end; both daemons end with one hash.
jobs_daemons 2 hier
jc submit "$DT_TEST_TMP/two_cpus.json" --watch --json >"$DT_TEST_TMP/hier.jsonl" ||
  dt_fail "the 2x2 job did not succeed: $(tail -1 "$DT_TEST_TMP/hier.jsonl")"
jc status 1 --json >"$DT_TEST_TMP/hier.json"
dt_assert_eq "$(dt_json_get examples "$DT_TEST_TMP/hier.json")" 512 "examples over 4 replicas"
h0=$(dt_json_get weights_hashes.0 "$DT_TEST_TMP/hier.json")
[[ -n $h0 ]] || dt_fail "the 2x2 run reported no weights hash"
dt_assert_eq "$(dt_json_get weights_hashes.1 "$DT_TEST_TMP/hier.json")" "$h0" "the two daemons' hashes"
dt_assert_contains "$DT_TEST_TMP/hier-w1.log" "rank 1 trains 2 CPU replicas .global ranks 2\\.\\.3 of 4" \
  "worker:1 ran replicas 2 and 3"
# Against 1 daemon x 4 replicas (in-host sums in member order, not (0+1) + (2+3)) and 1 replica
# (one sum over 32 examples): the same steps, so the same losses up to float32 reassociation.
jobs_follows "$DT_TEST_TMP/hier.jsonl" "$DT_TEST_TMP/four.jsonl" "2 daemons x 2 replicas against 1 daemon x 4"
jobs_follows "$DT_TEST_TMP/hier.jsonl" "$DT_TEST_TMP/single.jsonl" "2 daemons x 2 replicas against 1 replica"
echo "final weights: 2x2 $h0, 1x4 $four"
check_phases "$DT_TEST_TMP/hier-w0.log" ring
check_phases "$DT_TEST_TMP/hier-w1.log" ring

# Cancel reaches every replica of both daemons.
jc submit "$DT_TEST_TMP/long.json" >/dev/null
jobs_wait_state 2 running 20
jobs_wait_step_past 2 5 20
jc cancel 2 --timeout 15 >/dev/null || dt_fail "cancel of the 2x2 job"
jobs_wait_state 2 cancelled 15

# kill -9 of worker:1 mid-job: the job fails naming worker:1, within seconds; the chief lives.
jc submit "$DT_TEST_TMP/long.json" >/dev/null
jobs_wait_state 3 running 20
jobs_wait_step_past 3 5 20
t0=$(dt__now_ms)
kill -KILL "$(dt_daemon_pid hier-w1)"
jobs_wait_state 3 failed 15
echo "2x2 job failed $(ms_since "$t0") ms after kill -9 of worker:1"
err=$(jc status 3 --json | dt_json_get error || true)
echo "error: $err"
dt_assert_contains "$err" "worker:1" "the error names the dead task"
"$DT_BIN_DIR/dtrain" cluster --addr "$JOBS_ADDR" --json >/dev/null || dt_fail "the chief stopped answering"
echo "ok: CPU replicas"
