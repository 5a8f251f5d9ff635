#!/usr/bin/env bash
# timeout: 300
# Restarts under $.fault_tolerance, three tasks on loopback, shuffling on, a checkpoint every 40
# steps. kill -9 of a worker mid-job puts the job in `restarting`, the survivors stop at once,
# the worker (restarted 3 s later) rejoins and every task resumes from the latest checkpoint.
# A worker SIGSTOPped for 8 s is found hung within seconds and rejoins when it wakes, and no
# daemon calls a live peer dead. The final weights equal those of a run without faults. A task
# that never comes back fails the job naming it after rejoin_timeout_s, and a cancel while the
# job waits for a lost task ends it at once.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

jobs_data
FT=', "checkpoint": {"save_freq": 40, "keep": 2}, "fault_tolerance": {"max_restarts": 5, "rejoin_timeout_s": 60}'
jobs_spec "$DT_TEST_TMP/ft.json" 3000 96 "$FT"
sed -i 's/"shuffle": false/"shuffle": true/' "$DT_TEST_TMP/ft.json"
jobs_daemons 3 ft
for i in 0 1 2; do dt_on_exit "kill -CONT \$(cat $DT_TEST_TMP/ft-w$i.pid) 2>/dev/null"; done

# 1: the reference, without faults.
t0=$(dt__now_ms)
jc submit "$DT_TEST_TMP/ft.json" --watch >/dev/null || dt_fail "the fault-free job 1 failed"
echo "fault-free run: $(ms_since "$t0") ms"
ref=$(jc status 1 --json | dt_json_get weights_hashes.0)
[[ -n $ref ]] || dt_fail "job 1 has no weights hash"

# 2: the same job through a kill -9 and a SIGSTOP.
jc submit "$DT_TEST_TMP/ft.json" >/dev/null
jc watch 2 --json >"$DT_TEST_TMP/watch2.jsonl" 2>"$DT_TEST_TMP/watch2.err" &
watcher=$!
jobs_wait_state 2 running 20
jobs_wait_step_past 2 100
kill -KILL "$(dt_daemon_pid ft-w2)"
t_kill=$(dt__now_ms)
jobs_wait_state 2 restarting 10
echo "kill -9 of worker:2: restarting after $(ms_since "$t_kill") ms"
dt_wait_for grep -q "job 2: rank 1 ended" "$DT_TEST_TMP/ft-w1.log" --timeout 10 ||
  dt_fail "worker:1 did not stop its run"
echo "kill -9 of worker:2: the survivors stopped within $(ms_since "$t_kill") ms"
wait "$(dt_daemon_pid ft-w2)" 2>/dev/null || true
sleep 3
jobs_start_one ft 2
jobs_wait_state 2 running 30
echo "kill -9 of worker:2 (restarted after 3 s): running again after $(ms_since "$t_kill") ms"
dt_wait_for grep -q "resuming from .*jobs/2/checkpoints/ckpt-" "$DT_TEST_TMP/ft-w0.log" --timeout 10 ||
  dt_fail "job 2 did not resume from a checkpoint"
err=$(jc status 2 --json | dt_json_get error || true)
[[ -z $err || $err == None || $err == null ]] || dt_fail "a running job still shows an error: $err"

step=$(jobs_step 2)
jobs_wait_step_past 2 $((step + 100))
dead_before=$(grep -c "is dead" "$DT_TEST_TMP/ft-w0.log" || true)
kill -STOP "$(dt_daemon_pid ft-w1)"
t_stop=$(dt__now_ms)
jobs_wait_state 2 restarting 10
echo "SIGSTOP of worker:1: restarting after $(ms_since "$t_stop") ms"
sleep 5
dt_assert_eq "$(jobs_state 2)" restarting "the job waits for the stopped worker"
left=$((8000 - $(ms_since "$t_stop")))
((left <= 0)) || sleep "$(awk -v ms="$left" 'BEGIN { printf "%.3f", ms / 1000 }')"
kill -CONT "$(dt_daemon_pid ft-w1)"
t_cont=$(dt__now_ms)
jobs_wait_state 2 running 30
echo "SIGSTOP of worker:1 for 8 s: running again $(ms_since "$t_cont") ms after SIGCONT"
jobs_wait_state 2 succeeded 120
wait "$watcher" || dt_fail "the watcher of job 2 did not end with success: $(tail -3 "$DT_TEST_TMP/watch2.err")"

jobs_expect_weights 2 2 "$ref" 3 "after two restarts vs the fault-free run"
# Only the stopped worker was called dead, once; the woken one called nobody dead.
dead_after=$(grep -c "is dead" "$DT_TEST_TMP/ft-w0.log" || true)
dt_assert_eq "$((dead_after - dead_before))" 1 "deaths the chief saw during the SIGSTOP"
dt_assert_contains "$DT_TEST_TMP/ft-w0.log" "worker:1 .* is dead" "the chief names the stopped worker"
if grep -q "worker:0 .* is dead" "$DT_TEST_TMP/ft-w1.log"; then
  dt_fail "the woken worker:1 called the live chief dead: $(grep "is dead" "$DT_TEST_TMP/ft-w1.log")"
fi
dt_assert_contains "$DT_TEST_TMP/ft-w1.log" "this daemon did not run for" "worker:1 saw its own pause"
/usr/bin/python3 - "$DT_TEST_TMP/watch2.jsonl" <<'PY' || dt_fail "the watcher's view of the restarts"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
states = [e["state"] for e in ev if e["kind"] == "state"]
assert states.count("restarting") == 2 and states[-1] == "succeeded", states
msgs = [e.get("message", "") for e in ev if e["kind"] == "state" and e["state"] == "restarting"]
assert "worker:2" in msgs[0] and "restart 1 of 5" in msgs[0], msgs
assert "worker:1" in msgs[1] and "restart 2 of 5" in msgs[1], msgs
resumed = [e for e in ev if e["kind"] == "resumed"]
assert len(resumed) == 2 and all(e["metrics"]["global_step"] > 0 for e in resumed), resumed
print("states:", states, "resumed at global steps", [e["metrics"]["global_step"] for e in resumed])
PY
echo "ok: two restarts, the fault-free run's weights"

# 3: a worker that never comes back (rejoin_timeout_s 3): the job fails naming it.
jobs_spec "$DT_TEST_TMP/gone.json" 3000 96 ', "fault_tolerance": {"rejoin_timeout_s": 3}'
jc submit "$DT_TEST_TMP/gone.json" >/dev/null
jobs_wait_state 3 running 20
jobs_wait_step_past 3 50
kill -KILL "$(dt_daemon_pid ft-w2)"
t_kill=$(dt__now_ms)
jobs_wait_state 3 failed 20
echo "a worker that never returns: job failed $(ms_since "$t_kill") ms after kill -9 (rejoin_timeout_s 3)"
jc status 3 --json >"$DT_TEST_TMP/s3.json" || true # a failed job's status exits 1
err=$(dt_json_get error "$DT_TEST_TMP/s3.json")
dt_assert_contains "$err" "worker:2 at 127.0.0.1:[0-9]+ did not rejoin within 3 s" "the error names the missing task"
dt_assert_contains "$err" "stopped after: .*worker:2" "the error says what happened first"
echo "ok: a task that stays away fails the job, named"

# 4: a cancel while the job waits for a lost task ends it at once, not when the wait is over.
jobs_start_one ft 2
for i in 0 1 2; do dt_wait_file "$DT_TEST_TMP/ft-w$i.ready" --timeout 30 || dt_fail "worker:$i not back"; done
jc submit "$DT_TEST_TMP/ft.json" >/dev/null
jobs_wait_state 4 running 30
jobs_wait_step_past 4 50
kill -KILL "$(dt_daemon_pid ft-w2)"
jobs_wait_state 4 restarting 10
t0=$(dt__now_ms)
jc cancel 4 --timeout 15 >/dev/null || dt_fail "cancel of the restarting job 4"
echo "cancel of a job waiting for a lost task: cancelled after $(ms_since "$t0") ms (rejoin_timeout_s 60)"
dt_assert_eq "$(jobs_state 4)" cancelled "job 4 after the cancel"
sleep 1
dt_assert_eq "$(jobs_state 4)" cancelled "job 4 stays cancelled (no restart after the cancel)"
echo "ok: cancel while restarting"
