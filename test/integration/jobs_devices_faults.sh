#!/usr/bin/env bash
# timeout: 240
# Faults of a job with several CPU replicas a daemon (2 daemons x 2, $.strategy.devices), under
# $.fault_tolerance as for one replica (jobs_faults.sh, jobs_hung.sh): kill -9 of worker:1
# mid-job puts the job in `restarting` naming worker:1 within 5 s, and once worker:1 is back every
# replica resumes from the latest checkpoint; then worker:1's second replica thread (not the one
# the task started on) stops for 10 s: the hung-trainer watchdog, which watches every replica,
# finds it and names it, the job waits, and resumes when the thread runs again. The final weights
# equal those of the same job without faults.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

FREEZE="/usr/bin/python3 $DT_SRC_DIR/test/tools/freeze_thread.py"
jobs_data
FT=', "strategy": {"devices": ["/cpu:0", "/cpu:1"]}, "checkpoint": {"save_freq": 40, "keep": 2}, "fault_tolerance": {"max_restarts": 3, "rejoin_timeout_s": 60}'
jobs_spec "$DT_TEST_TMP/ft.json" 600 96 "$FT"
jobs_daemons 2 df

# 1: the reference, without faults (and without a false alarm of the watchdog).
t0=$(dt__now_ms)
jc submit "$DT_TEST_TMP/ft.json" --watch >/dev/null || dt_fail "the fault-free job 1 failed"
echo "fault-free run, 2 daemons x 2 replicas: $(ms_since "$t0") ms"
ref=$(jc status 1 --json | dt_json_get weights_hashes.0)
[[ -n $ref ]] || dt_fail "job 1 has no weights hash"
dt_assert_eq "$(jc status 1 --json | dt_json_get restarts)" 0 "restarts of the fault-free job"

# 2: kill -9 of worker:1 (both of its replicas) mid-job.
jc submit "$DT_TEST_TMP/ft.json" >/dev/null
jobs_wait_state 2 running 20
jobs_wait_step_past 2 100
kill -KILL "$(dt_daemon_pid df-w1)"
t_kill=$(dt__now_ms)
jobs_wait_state 2 restarting 5
dt_wait_for grep -q "job 2: rank 0 ended" "$DT_TEST_TMP/df-w0.log" --timeout 5 ||
  dt_fail "the chief's replicas did not stop within 5 s"
echo "kill -9 of worker:1: restarting, the chief's replicas stopped, after $(ms_since "$t_kill") ms"
err=$(jc status 2 --json | dt_json_get error || true)
echo "error: $err"
dt_assert_contains "$err" "worker:1" "the restart names the dead task"
wait "$(dt_daemon_pid df-w1)" 2>/dev/null || true
sleep 2
jobs_start_one df 1
jobs_wait_state 2 running 30
echo "kill -9 of worker:1 (restarted after 2 s): running again after $(ms_since "$t_kill") ms"
dt_wait_for grep -q "resuming from .*jobs/2/checkpoints/ckpt-" "$DT_TEST_TMP/df-w0.log" --timeout 10 ||
  dt_fail "job 2 did not resume from a checkpoint"
dt_assert_contains "$DT_TEST_TMP/df-w1.log" "rank 1 trains 2 CPU replicas" "the restarted worker:1 runs its 2 replicas"

# 3: worker:1's replica /cpu:1 (thread dt-replica) stops for 10 s mid-job.
step=$(jobs_step 2)
jobs_wait_step_past 2 $((step + 100))
$FREEZE "$(dt_daemon_pid df-w1)" dt-replica 10 >"$DT_TEST_TMP/freeze.out" 2>&1 &
freezer=$!
dt_on_exit "kill $freezer 2>/dev/null"
dt_wait_for grep -q frozen "$DT_TEST_TMP/freeze.out" --timeout 5 || {
  wait "$freezer"
  rc=$?
  ((rc == 77)) && dt_skip "ptrace is not allowed here: $(cat "$DT_TEST_TMP/freeze.out")"
  dt_fail "could not freeze worker:1's second replica: $(cat "$DT_TEST_TMP/freeze.out")"
}
t_freeze=$(dt__now_ms)
jobs_wait_state 2 restarting 15
echo "replica 1 of worker:1 frozen: restarting after $(ms_since "$t_freeze") ms"
dt_assert_contains "$(jc status 2 --json | dt_json_get error)" "worker:1.*hung" "the restart names the hung task"
dt_assert_contains "$DT_TEST_TMP/df-w1.log" "trainer of job 2 is hung: no progress for [0-9.]+ s in .*\(replica 1 of its 2\)" \
  "worker:1's watchdog names the replica"
dt_wait_for grep -q "job 2: rank 0 ended" "$DT_TEST_TMP/df-w0.log" --timeout 10 || dt_fail "the chief's rank did not stop"
wait "$freezer" || dt_fail "the freezer failed: $(cat "$DT_TEST_TMP/freeze.out")"
t_thaw=$(dt__now_ms)
jobs_wait_state 2 running 30
echo "replica 1 of worker:1 thawed after 10 s: running again after $(ms_since "$t_thaw") ms"
dt_assert_contains "$DT_TEST_TMP/df-w1.log" "the hung trainer returned" "worker:1 saw its replica return"
jobs_wait_state 2 succeeded 120
jobs_expect_weights 2 2 "$ref" 2 "after a kill -9 and a hung replica vs the fault-free run"
echo "ok: 2 daemons x 2 replicas restart through a kill -9 and a hung replica"
