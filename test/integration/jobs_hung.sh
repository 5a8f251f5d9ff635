#!/usr/bin/env bash
# timeout: 240
# A hung trainer in a live daemon (a stuck device or blocked I/O: here one thread stopped with
# ptrace while the daemon's loop, heartbeats and ring keep running). Its watchdog finds it
# within $.fault_tolerance.hang_timeout_s (4 s), aborts its ring so the survivors stop at once
# naming it, and reports the task unhealthy: `dtrain cluster` says why, and the job waits in
# `restarting`. When the thread runs again the task is healthy and the job resumes from its
# latest checkpoint to the weights of a run without faults; nobody is called dead. A trainer
# that stays hung past rejoin_timeout_s fails the job naming the task.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

FREEZE="/usr/bin/python3 $DT_SRC_DIR/test/tools/freeze_thread.py"
jobs_data
FT=', "checkpoint": {"save_freq": 40, "keep": 2}, "fault_tolerance": {"max_restarts": 2, "rejoin_timeout_s": 60}'
jobs_spec "$DT_TEST_TMP/hung.json" 1000 96 "$FT"
sed -i 's/"shuffle": false/"shuffle": true/' "$DT_TEST_TMP/hung.json"
jobs_daemons 3 hg

# 1: the reference, without faults (and without a false alarm on a busy machine).
jc submit "$DT_TEST_TMP/hung.json" --watch >/dev/null || dt_fail "the fault-free job 1 failed"
ref=$(jc status 1 --json | dt_json_get weights_hashes.0)
dt_assert_eq "$(jc status 1 --json | dt_json_get restarts)" 0 "restarts of the fault-free job"

# 2: worker:1's trainer thread stops for 12 s mid-job.
jc submit "$DT_TEST_TMP/hung.json" >/dev/null
jobs_wait_state 2 running 20
jobs_wait_step_past 2 100
$FREEZE "$(dt_daemon_pid hg-w1)" dt-train 12 >"$DT_TEST_TMP/freeze.out" 2>&1 &
freezer=$!
dt_on_exit "kill $freezer 2>/dev/null"
dt_wait_for grep -q frozen "$DT_TEST_TMP/freeze.out" --timeout 5 || {
  wait "$freezer"
  rc=$?
  ((rc == 77)) && dt_skip "ptrace is not allowed here: $(cat "$DT_TEST_TMP/freeze.out")"
  dt_fail "could not freeze worker:1's trainer: $(cat "$DT_TEST_TMP/freeze.out")"
}
t_freeze=$(dt__now_ms)
jobs_wait_state 2 restarting 15
echo "trainer of worker:1 frozen: restarting after $(ms_since "$t_freeze") ms"
dt_wait_for grep -q "job 2: rank 0 ended" "$DT_TEST_TMP/hg-w0.log" --timeout 10 ||
  dt_fail "the chief's rank did not stop"
dt_wait_for grep -q "job 2: rank 2 ended" "$DT_TEST_TMP/hg-w2.log" --timeout 10 ||
  dt_fail "worker:2's rank did not stop"
echo "trainer of worker:1 frozen: the other ranks stopped within $(ms_since "$t_freeze") ms"
jc status 2 --json >"$DT_TEST_TMP/s2.json"
dt_assert_contains "$(dt_json_get error "$DT_TEST_TMP/s2.json")" "worker:1.*hung" \
  "the restart names the hung task"
w1_unhealthy() {
  jc cluster --json >"$DT_TEST_TMP/cluster.json" &&
    [[ $(dt_json_get tasks.1.unhealthy "$DT_TEST_TMP/cluster.json") == *hung* ]]
}
dt_wait_for w1_unhealthy --timeout 5 || dt_fail "the chief never saw worker:1 unhealthy"
echo "trainer of worker:1 frozen: the chief sees worker:1 unhealthy after $(ms_since "$t_freeze") ms"
dt_assert_contains "$(dt_json_get tasks.1.unhealthy "$DT_TEST_TMP/cluster.json")" \
  "trainer of job 2 is hung: no progress for [0-9.]+ s" "cluster shows worker:1 unhealthy, and why"
dt_assert_eq "$(dt_json_get tasks.1.state "$DT_TEST_TMP/cluster.json")" joined "worker:1 is alive"
"$DT_BIN_DIR/dtrain" --addr "$JOBS_ADDR" cluster | grep -q "worker:1 is unhealthy: " ||
  dt_fail "the cluster table does not say why worker:1 is unhealthy"
sleep 3
dt_assert_eq "$(jobs_state 2)" restarting "the job waits for the hung task"
wait "$freezer" || dt_fail "the freezer failed: $(cat "$DT_TEST_TMP/freeze.out")"
t_thaw=$(dt__now_ms)
jobs_wait_state 2 running 30
echo "trainer of worker:1 thawed after 12 s: running again after $(ms_since "$t_thaw") ms"
dt_assert_contains "$DT_TEST_TMP/hg-w1.log" "the hung trainer returned" "worker:1 saw its trainer return"
jobs_wait_state 2 succeeded 120
jobs_expect_weights 2 1 "$ref" 3 "after the hang vs the fault-free run"
for i in 0 1 2; do
  if grep -q "is dead" "$DT_TEST_TMP/hg-w$i.log"; then
    dt_fail "worker:$i called a live task dead: $(grep "is dead" "$DT_TEST_TMP/hg-w$i.log")"
  fi
done
echo "ok: a hung trainer restarts the job; the fault-free run's weights"

# 3: a trainer that stays hung past rejoin_timeout_s (4 s) fails the job, naming the task.
jobs_spec "$DT_TEST_TMP/stuck.json" 1000 96 ', "fault_tolerance": {"rejoin_timeout_s": 4}'
jc submit "$DT_TEST_TMP/stuck.json" >/dev/null
jobs_wait_state 3 running 20
jobs_wait_step_past 3 50
$FREEZE "$(dt_daemon_pid hg-w2)" dt-train 25 >"$DT_TEST_TMP/freeze3.out" 2>&1 &
freezer=$!
dt_on_exit "kill $freezer 2>/dev/null"
dt_wait_for grep -q frozen "$DT_TEST_TMP/freeze3.out" --timeout 5 || dt_fail "could not freeze worker:2"
t_freeze=$(dt__now_ms)
jobs_wait_state 3 failed 30
echo "a trainer hung for good: job failed $(ms_since "$t_freeze") ms after the freeze (rejoin_timeout_s 4)"
jc status 3 --json >"$DT_TEST_TMP/s3.json" || true # a failed job's status exits 1
err=$(dt_json_get error "$DT_TEST_TMP/s3.json")
dt_assert_contains "$err" "worker:2 at 127.0.0.1:[0-9]+ \(alive, but its trainer is still hung\) did not rejoin within 4 s" \
  "the error names the hung task"
kill "$freezer" 2>/dev/null
wait "$freezer" 2>/dev/null || true
dt_wait_for grep -q "worker:2 .* is healthy again" "$DT_TEST_TMP/hg-w0.log" --timeout 15 ||
  dt_fail "worker:2 did not become healthy once its trainer ran again"
echo "ok: a trainer hung for good fails the job, named; the task is healthy once it runs again"
