#!/usr/bin/env bash
# timeout: 150
# The chief is killed (kill -9) and restarted 5, 7 and 9 s later (the window where 0.4.1 lost 2
# of 11 resumes; the shipped unit restarts after 5 s) while a two-task job runs: each time the
# job resumes and is still running 11 s after the kill, while the worker's end reports for the
# killed run may still come. (Whether such a report lands in the new run is a race; jobs_two's
# probe sends them deterministically.) Three restarts: the default $.fault_tolerance.max_restarts.
# test/faults/chief_restarts_random.sh does 20, at random delays.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

jobs_data
jobs_spec "$DT_TEST_TMP/job.json" 100000 32 ', "checkpoint": {"save_freq": 50, "keep": 2}'
jobs_daemons 2 cr

jc submit "$DT_TEST_TMP/job.json" >/dev/null
jobs_wait_state 1 running 20
for delay in 5 7 9; do
  dt_wait_for grep -q "jobs/1/checkpoints/ckpt-" "$DT_TEST_TMP/cr-w0.log" --timeout 30 ||
    dt_fail "no checkpoint before the kill"
  kill -KILL "$(dt_daemon_pid cr-w0)"
  t_kill=$(dt__now_ms)
  wait "$(dt_daemon_pid cr-w0)" 2>/dev/null || true
  mv "$DT_TEST_TMP/cr-w0.log" "$DT_TEST_TMP/cr-w0.before-$delay.log"
  sleep "$delay"
  jobs_start_one cr 0
  dt_wait_file "$DT_TEST_TMP/cr-w0.ready" --timeout 30 || dt_fail "the chief did not come back"
  jobs_wait_state 1 running 30
  echo "restart after ${delay} s: running again $(($(dt__now_ms) - t_kill)) ms after the kill"
  # Long enough for the worker's retried end reports of the killed run to come.
  left=$((11000 - ($(dt__now_ms) - t_kill)))
  ((left > 0)) && sleep "$(awk -v ms="$left" 'BEGIN { printf "%.3f", ms / 1000 }')"
  st=$(jobs_state 1)
  [[ $st == running ]] || dt_fail "job 1 is $st 11 s after the chief's kill ($delay s restart): $(jc status 1 2>&1)"
done
dt_assert_eq "$(jc status 1 --json | dt_json_get restarts)" 3 "restarts"
jc cancel 1 --timeout 15 >/dev/null || dt_fail "cancel of job 1"
echo "ok: three chief restarts inside the window"
