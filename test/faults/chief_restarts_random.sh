#!/usr/bin/env bash
# timeout: 600
# The chief is killed (kill -9) and restarted after a random delay of 1 to 12 s, 20 times in a
# row, while a two-task job with shuffling on runs ($.fault_tolerance.max_restarts 25): every
# resume succeeds, and the job ends with the final weights of a run that never stopped.
# DT_CHAOS_SEED fixes the delays (printed, so a failing sequence can be replayed).
source "$(dirname "$0")/../integration/lib.sh"
source "$(dirname "$0")/../integration/lib_jobs.sh"

seed=${DT_CHAOS_SEED:-$((RANDOM * 32768 + RANDOM))}
RANDOM=$seed
echo "delays from seed $seed (DT_CHAOS_SEED)"

jobs_data
jobs_spec "$DT_TEST_TMP/job.json" 5000 32 ', "checkpoint": {"save_freq": 40, "keep": 2},
  "fault_tolerance": {"max_restarts": 25, "rejoin_timeout_s": 60}'
sed -i 's/"shuffle": false/"shuffle": true/' "$DT_TEST_TMP/job.json"
jobs_daemons 2 cr

t0=$(dt__now_ms)
jc submit "$DT_TEST_TMP/job.json" --watch >/dev/null || dt_fail "the fault-free job 1 failed"
echo "fault-free run: $(ms_since "$t0") ms"
ref=$(jc status 1 --json | dt_json_get weights_hashes.0)

jc submit "$DT_TEST_TMP/job.json" >/dev/null
jobs_wait_state 2 running 20
delays=() recover=()
for k in $(seq 1 20); do
  jobs_wait_step_past 2 $(($(jobs_step 2) + 60))
  [[ $(jobs_state 2) == running ]] || dt_fail "job 2 ended before kill $k: $(jc status 2 2>&1)"
  delay=$((RANDOM % 12 + 1))
  delays+=("$delay")
  kill -KILL "$(dt_daemon_pid cr-w0)"
  t_kill=$(dt__now_ms)
  wait "$(dt_daemon_pid cr-w0)" 2>/dev/null || true
  mv "$DT_TEST_TMP/cr-w0.log" "$DT_TEST_TMP/cr-w0.before-$k.log"
  sleep "$delay"
  jobs_start_one cr 0
  dt_wait_file "$DT_TEST_TMP/cr-w0.ready" --timeout 30 || dt_fail "the chief did not come back after kill $k"
  jobs_wait_state 2 running 40
  recover+=("$(ms_since "$t_kill")")
  echo "kill $k, restart after ${delay} s: running again $(ms_since "$t_kill") ms after the kill"
done
jobs_wait_state 2 succeeded 300
jobs_expect_weights 2 20 "$ref" 2 "after 20 chief restarts vs the fault-free run"
/usr/bin/python3 - "${delays[*]}" "${recover[*]}" <<'PY'
import sys
d = [int(x) for x in sys.argv[1].split()]
r = [int(x) for x in sys.argv[2].split()]
over = [b - a * 1000 for a, b in zip(d, r)]
print("20 chief restarts: delays %s s; running again after the restart: median %d ms, max %d ms"
      % (d, sorted(over)[len(over) // 2], max(over)))
PY
echo "ok: 20 chief restarts at random delays, every resume succeeded, the fault-free weights"
