#!/usr/bin/env bash
# timeout: 120
# Two daemons train one job over the ring: both replicas end with the same weights (hashes);
# cancel stops both; kill -9 of worker:1 mid-job (no restarts allowed) fails the job with an
# error naming it while the chief stays up; once worker:1 is back the queue goes on.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

jobs_data
jobs_spec "$DT_TEST_TMP/tiny.json" 2 32
jobs_spec "$DT_TEST_TMP/long.json" 100000 32 ', "checkpoint": {"save_freq": 100000000}'
jobs_spec "$DT_TEST_TMP/norestart.json" 100000 32 ', "checkpoint": {"save_freq": 100000000}, "fault_tolerance": {"max_restarts": 0}'
jobs_daemons 2 two

jc submit "$DT_TEST_TMP/tiny.json" --watch --json >"$DT_TEST_TMP/watch1.jsonl" ||
  dt_fail "the two-task job did not succeed: $(tail -1 "$DT_TEST_TMP/watch1.jsonl")"
jc status 1 --json >"$DT_TEST_TMP/s1.json"
dt_assert_eq "$(dt_json_get world_size "$DT_TEST_TMP/s1.json")" 2 "world size"
dt_assert_eq "$(dt_json_get examples "$DT_TEST_TMP/s1.json")" 512 "examples over both shards"
h0=$(dt_json_get weights_hashes.0 "$DT_TEST_TMP/s1.json")
h1=$(dt_json_get weights_hashes.1 "$DT_TEST_TMP/s1.json")
[[ -n $h0 ]] || dt_fail "rank 0 reported no weights hash"
dt_assert_eq "$h1" "$h0" "the replicas' final weights hashes"
dt_assert_contains "$DT_TEST_TMP/two-w1.log" "job 1: rank 1 done" "worker:1 trained job 1"

# Cancel reaches both tasks.
jc submit "$DT_TEST_TMP/long.json" >/dev/null
jobs_wait_state 2 running 20
sleep 0.5
jc cancel 2 --timeout 15 >/dev/null || dt_fail "cancel of the two-task job"
dt_wait_for grep -q "job 2: rank 1 ended" "$DT_TEST_TMP/two-w1.log" --timeout 10 ||
  dt_fail "worker:1 did not stop job 2"

# kill -9 of worker:1 during a job that allows no restart: failed, naming worker:1, within
# seconds; the chief lives.
jc submit "$DT_TEST_TMP/norestart.json" >/dev/null
jobs_wait_state 3 running 20
sleep 0.5
t0=$(dt__now_ms)
kill -KILL "$(dt_daemon_pid two-w1)"
jobs_wait_state 3 failed 15
echo "job failed $(($(dt__now_ms) - t0)) ms after kill -9 of worker:1"
err=$(jc status 3 --json | dt_json_get error || true)
echo "error: $err"
dt_assert_contains "$err" "worker:1" "the error names the dead task"
dt_assert_contains "$err" "no restart .\\$.fault_tolerance.max_restarts is 0" "the error says why it did not restart"
"$DT_BIN_DIR/dtrain" cluster --addr "$JOBS_ADDR" --json >/dev/null || dt_fail "the chief stopped answering"

# The next job waits for the cluster, then runs once worker:1 is back.
jc submit "$DT_TEST_TMP/tiny.json" >/dev/null
sleep 1
dt_assert_eq "$(jobs_state 4)" queued "job 4 waits for worker:1"
wait "$(dt_daemon_pid two-w1)" 2>/dev/null || true
jobs_start_one two 1
jobs_wait_state 4 succeeded 60

# Reports and cancels of an earlier run (another session: a restarted chief's previous run)
# change nothing about the running job, whenever they come.
jc submit "$DT_TEST_TMP/long.json" >/dev/null
jobs_wait_state 5 running 20
probe_ok=0
for r in "$DT_BIN_DIR/../build/dt_test" "$DT_BIN_DIR/../dt_test" "$DT_SRC_DIR/build/dt_test"; do
  if [[ -x $r ]]; then
    DT_STALE_PROBE_CHIEF=$JOBS_ADDR DT_STALE_PROBE_WORKER=${JOBS_ADDRS[1]} DT_STALE_PROBE_JOB=5 \
      "$r" --run-one service_rpc_stale_reports_change_nothing || dt_fail "stale reports (see above)"
    probe_ok=1
    break
  fi
done
[[ $probe_ok == 1 ]] || dt_fail "no dt_test binary for the stale-report probe"
dt_assert_contains "$DT_TEST_TMP/two-w0.log" "job 5: dropped rank 1's end report of an earlier run" \
  "the chief dropped the stale Finished"
dt_assert_eq "$(jobs_state 5)" running "job 5 after the stale reports"
jc cancel 5 --timeout 15 >/dev/null || dt_fail "cancel of job 5"
dt_assert_eq "$(jobs_state 5)" cancelled "job 5 after its cancel"
echo "ok: two tasks"
