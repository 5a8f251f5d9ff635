#!/usr/bin/env bash
# timeout: 90
# Jobs run one at a time in submit order; cancel stops a running job within seconds (state
# cancelled) and a queued one at once; the queue goes on; a daemon restart (kill -9) keeps the
# job list, and the job that was running resumes from its latest checkpoint.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

jobs_data
jobs_spec "$DT_TEST_TMP/long.json" 100000 32 ', "checkpoint": {"save_freq": 100000000}'
jobs_spec "$DT_TEST_TMP/short.json" 2 32
jobs_spec "$DT_TEST_TMP/ckpt.json" 100000 32 ', "checkpoint": {"save_freq": 40, "keep": 2}'
jobs_daemons 1 q

dt_assert_contains "$(jc submit "$DT_TEST_TMP/long.json")" "^job 1 " "job 1"
dt_assert_contains "$(jc submit "$DT_TEST_TMP/short.json")" "^job 2 " "job 2"
dt_assert_contains "$(jc submit "$DT_TEST_TMP/short.json")" "^job 3 " "job 3"
dt_assert_contains "$(jc submit "$DT_TEST_TMP/ckpt.json")" "^job 4 " "job 4"
jobs_wait_state 1 running 20
sleep 0.5
dt_assert_eq "$(jobs_state 2)" queued "job 2 waits while job 1 runs"
dt_assert_eq "$(jobs_state 3)" queued "job 3 waits while job 1 runs"

# A queued job is cancelled at once and never runs.
jc cancel 3 >/dev/null || dt_fail "cancel of queued job 3"
dt_assert_eq "$(jobs_state 3)" cancelled "queued job 3 cancelled"

# Cancel of the running job: cancelled within seconds, with its step count frozen.
t0=$(dt__now_ms)
jc cancel 1 --timeout 15 >"$DT_TEST_TMP/cancel.out" || dt_fail "cancel 1 failed: $(cat "$DT_TEST_TMP/cancel.out")"
t1=$(dt__now_ms)
echo "cancel of a running job took $((t1 - t0)) ms"
((t1 - t0 < 10000)) || dt_fail "cancel took $((t1 - t0)) ms"
dt_assert_eq "$(jobs_state 1)" cancelled "job 1 state"
dt_assert_contains "$(jc status 1 --json | dt_json_get error)" "cancelled" "job 1 error"
rc=0; jc status 1 >/dev/null || rc=$?
dt_assert_eq "$rc" 1 "status of a cancelled job exits 1"
rc=0; jc watch 1 --json >/dev/null || rc=$?
dt_assert_eq "$rc" 1 "watch of a cancelled job exits 1"

# The queue goes on: job 2 runs and succeeds after job 1 ended, then job 4 starts.
jobs_wait_state 2 succeeded 30
jc status 1 --json >"$DT_TEST_TMP/s1.json" || true # exit 1: cancelled
jc status 2 --json >"$DT_TEST_TMP/s2.json"
/usr/bin/python3 - "$DT_TEST_TMP/s1.json" "$DT_TEST_TMP/s2.json" <<'PY' || dt_fail "job 2 overlapped job 1"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert b["started_unix"] >= a["finished_unix"], (a["finished_unix"], b["started_unix"])
PY
jobs_wait_state 4 running 20
dt_wait_for grep -q "jobs/4/checkpoints/ckpt-" "$DT_TEST_TMP/q-w0.log" --timeout 20 || dt_fail "job 4 wrote no checkpoint"

# kill -9 of the daemon while job 4 runs; the restarted daemon keeps the list and resumes job 4.
kill -KILL "$(dt_daemon_pid q-w0)"
wait "$(dt_daemon_pid q-w0)" 2>/dev/null || true
# Junk in the jobs directory is skipped with a warning, not fatal.
mkdir -p "$DT_TEST_TMP/q-w0/jobs/77" "$DT_TEST_TMP/q-w0/jobs/not-a-job" "$DT_TEST_TMP/q-w0/jobs/78"
printf '{"state": "runn' >"$DT_TEST_TMP/q-w0/jobs/77/state.json"
printf '{"id": "78", "state": "bogus"}' >"$DT_TEST_TMP/q-w0/jobs/78/state.json"
jobs_start_one q 0
dt_wait_file "$DT_TEST_TMP/q-w0.ready" --timeout 20 || dt_fail "the daemon did not come back"
jc jobs --json >"$DT_TEST_TMP/jobs.json"
/usr/bin/python3 - "$DT_TEST_TMP/jobs.json" <<'PY' || dt_fail "the job list did not survive the restart"
import json, sys
jobs = {j["id"]: j for j in json.load(open(sys.argv[1]))["jobs"]}
assert sorted(jobs) == ["1", "2", "3", "4"], sorted(jobs)
assert [jobs[i]["state"] for i in "123"] == ["cancelled", "succeeded", "cancelled"], jobs
assert jobs["4"]["state"] in ("queued", "preparing", "running"), jobs["4"]
assert jobs["4"]["restarts"] == 1, jobs["4"]
assert jobs["2"]["metrics"]["accuracy"] > 0, jobs["2"]
PY
dt_assert_contains "$DT_TEST_TMP/q-w0.log" "skipping .*jobs/77" "a truncated state file is skipped"
dt_assert_contains "$DT_TEST_TMP/q-w0.log" "skipping .*jobs/78" "a bad state is skipped"
jobs_wait_state 4 running 20
dt_wait_for grep -q "resuming from .*jobs/4/checkpoints/ckpt-" "$DT_TEST_TMP/q-w0.log" --timeout 10 ||
  dt_fail "job 4 did not resume from its checkpoint"
jc cancel 4 >/dev/null || dt_fail "cancel of the resumed job 4"
# Its final weights are still there, and new ids go on from the old ones.
jc export 2 -o "$DT_TEST_TMP/w2.safetensors" >/dev/null || dt_fail "export after restart"
dt_assert_contains "$(jc submit "$DT_TEST_TMP/short.json")" "^job 5 " "the next id after a restart"
jobs_wait_state 5 succeeded 30
echo "ok: queue, cancel, restart"
