#!/usr/bin/env bash
# timeout: 120
# The chief is killed (kill -9) while a two-task job runs: the worker's run fails and stops;
# the restarted chief re-queues the job, the worker rejoins, and the job resumes from the
# chief's latest checkpoint on both tasks (the chief broadcasts it) and succeeds with the same
# weights on both replicas; the progress history is still there to watch.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

jobs_data
jobs_spec "$DT_TEST_TMP/job.json" 150 32 ', "checkpoint": {"save_freq": 100, "keep": 2}'
jobs_daemons 2 res

jc submit "$DT_TEST_TMP/job.json" >/dev/null
jobs_wait_state 1 running 20
dt_wait_for grep -q "jobs/1/checkpoints/ckpt-" "$DT_TEST_TMP/res-w0.log" --timeout 30 ||
  dt_fail "job 1 wrote no checkpoint"
# A watcher follows job 1 through the chief's death and restart.
jc watch 1 --json >"$DT_TEST_TMP/live.jsonl" 2>"$DT_TEST_TMP/live.err" &
watcher=$!
dt_wait_for test -s "$DT_TEST_TMP/live.jsonl" --timeout 10 || dt_fail "the watcher printed nothing"
kill -KILL "$(dt_daemon_pid res-w0)"
t_kill=$(dt__now_ms)
wait "$(dt_daemon_pid res-w0)" 2>/dev/null || true
dt_wait_for grep -q "does not answer" "$DT_TEST_TMP/live.err" --timeout 8 ||
  dt_fail "watch did not say the chief was down: $(cat "$DT_TEST_TMP/live.err")"
echo "watch said the chief was down $(($(dt__now_ms) - t_kill)) ms after kill -9"
dt_assert_contains "$DT_TEST_TMP/live.err" "the chief at $JOBS_ADDR does not answer" "watch names the chief"
dt_wait_for grep -q "job 1: rank 1 ended" "$DT_TEST_TMP/res-w1.log" --timeout 15 ||
  dt_fail "worker:1 did not stop its run when the chief died"

jobs_start_one res 0
dt_wait_file "$DT_TEST_TMP/res-w0.ready" --timeout 30 || dt_fail "the chief did not come back"
jobs_wait_state 1 succeeded 90
rc=0
dt_wait_for_exit() { ! kill -0 "$watcher" 2>/dev/null; }
dt_wait_for dt_wait_for_exit --timeout 15 || dt_fail "the watcher did not end with the job"
wait "$watcher" || rc=$?
dt_assert_eq "$rc" 0 "the watcher's exit status (the job succeeded)"
dt_assert_contains "$DT_TEST_TMP/live.err" "restarted; following job 1 on" "watch saw the restart"
/usr/bin/python3 - "$DT_TEST_TMP/live.jsonl" <<'PY' || dt_fail "the live watcher's lines"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
states = [e["state"] for e in ev if e["kind"] == "state"]
# running, then (the chief back) queued again, preparing, running, succeeded
assert states[-1] == "succeeded" and "queued" in states[states.index("running"):], states
PY
dt_assert_contains "$DT_TEST_TMP/res-w0.log" "resuming from .*jobs/1/checkpoints/ckpt-" "resumed from a checkpoint"
jc status 1 --json >"$DT_TEST_TMP/s.json"
dt_assert_eq "$(dt_json_get restarts "$DT_TEST_TMP/s.json")" 1 "restarts"
dt_assert_eq "$(dt_json_get weights_hashes.1 "$DT_TEST_TMP/s.json")" \
  "$(dt_json_get weights_hashes.0 "$DT_TEST_TMP/s.json")" "the replicas' final weights after the resume"
# The progress history survived the kill: watch shows epoch 1 (run before the restart) once,
# and the events stay numbered in order. (Epochs after the last checkpoint run twice.)
jc watch 1 --json >"$DT_TEST_TMP/watch.jsonl" || dt_fail "watch of the finished job"
/usr/bin/python3 - "$DT_TEST_TMP/watch.jsonl" <<'PY' || dt_fail "the event history after the restart"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
seqs = [e["seq"] for e in ev]
assert seqs == sorted(set(seqs)) and seqs[0] == 1, seqs
ends = [e["epoch"] for e in ev if e["kind"] == "epoch_end"]
assert ends.count(1) == 1 and ends[-1] == 150, ends
states = [e["state"] for e in ev if e["kind"] == "state"]
assert states == ["queued", "preparing", "running", "queued", "preparing", "running", "succeeded"], states
requeue = [e for e in ev if e["kind"] == "state"][3]
assert "resumes from its latest checkpoint (restart 1 of 3)" in requeue["message"], requeue
print("events:", len(ev), "epoch ends:", len(ends), "states:", states)
PY
echo "ok: resume after a chief restart"

# dtrain resume: a cancelled job resumes from its latest checkpoint and ends with the weights
# of a run that never stopped.
jobs_spec "$DT_TEST_TMP/long.json" 400 32 ', "checkpoint": {"save_freq": 200, "keep": 2}'
jc submit "$DT_TEST_TMP/long.json" >/dev/null
jobs_wait_state 2 running 20
dt_wait_for grep -q "jobs/2/checkpoints/ckpt-" "$DT_TEST_TMP/res-w0.log" --timeout 30 ||
  dt_fail "job 2 wrote no checkpoint"
jc cancel 2 --timeout 15 >/dev/null || dt_fail "cancel of job 2 (did it end first?)"
jc resume 2 --watch --json >"$DT_TEST_TMP/resume.jsonl" ||
  dt_fail "the resumed job 2 did not succeed: $(tail -2 "$DT_TEST_TMP/resume.jsonl")"
dt_assert_contains "$DT_TEST_TMP/res-w0.log" "resuming from .*jobs/2/checkpoints/ckpt-" "job 2 resumed from a checkpoint"
jc submit "$DT_TEST_TMP/long.json" --watch >/dev/null || dt_fail "the uninterrupted job 3"
h2=$(jc status 2 --json | dt_json_get weights_hashes.0)
h3=$(jc status 3 --json | dt_json_get weights_hashes.0)
[[ -n $h2 ]] || dt_fail "job 2 has no weights hash"
dt_assert_eq "$h2" "$h3" "final weights: cancelled and resumed vs never stopped"
dt_assert_eq "$(jc status 2 --json | dt_json_get weights_hashes.1)" "$h2" "job 2's replicas"
# What cannot resume says why, exit 2.
set +e
out=$(jc resume 3 2>&1)
rc=$?
set -e
dt_assert_eq "$rc" 2 "exit status of resuming a job that succeeded"
dt_assert_contains "$out" "only a failed or cancelled job resumes" "the refusal"
set +e
jc resume 99 >/dev/null 2>&1
rc=$?
set -e
dt_assert_eq "$rc" 2 "exit status of resuming an unknown job"
echo "ok: dtrain resume"
