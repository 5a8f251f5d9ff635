#!/usr/bin/env bash
# timeout: 600
# The chaos run: three hosts, each in its own network namespace, train one job with shuffling
# on and a checkpoint every 40 steps. Worker 1 and then worker 2 are killed (kill -9) and started
# again 3 s later, then the chief is killed and started again 7 s later (inside the 5-9 s window
# where 0.4.1 lost resumes), then worker 1 is SIGSTOPped for 30 s. The job succeeds, and its
# final weights equal those of the same job run without faults. Detection and recovery times are
# printed (the README's "Faults and recovery" quotes them).
source "$(dirname "$0")/../integration/lib.sh"
source "$(dirname "$0")/../integration/lib_jobs.sh"

dt_netns_up 3
addrs=()
for i in 0 1 2; do addrs+=("$(dt_netns_addr "$i"):7090"); done
head -c 24 /dev/urandom | base64 >"$DT_TEST_TMP/token"
chmod 600 "$DT_TEST_TMP/token"
jobs_data

# host I's daemon, in its namespace; its state survives restarts.
host_start() {
  local i=$1
  rm -f "$DT_TEST_TMP/h$i.ready"
  [[ -f $DT_TEST_TMP/h$i.log ]] && cat "$DT_TEST_TMP/h$i.log" >>"$DT_TEST_TMP/h$i.all.log"
  dt_bg "h$i" "$DT_NETNS" exec "$i" env TF_CONFIG="$(dt_tfconfig_workers "$i" "${addrs[@]}")" \
    "$DT_BIN_DIR/dtraind" --token-file "$DT_TEST_TMP/token" --state-dir "$DT_TEST_TMP/h$i" \
    --data-root "$JOBS_DATA" --rendezvous-timeout 60 --ready-file "$DT_TEST_TMP/h$i.ready"
}
# the dtraind process of host I (not the `ip netns exec` wrapper)
host_pid() {
  pgrep -f -- "--ready-file $DT_TEST_TMP/h$1.ready" | while read -r p; do
    [[ $(cat "/proc/$p/comm" 2>/dev/null) == dtraind ]] && echo "$p"
  done
}
host_kill() {
  local p
  p=$(host_pid "$1")
  [[ -n $p ]] || dt_fail "cannot find host $1's daemon"
  kill -KILL "$p"
  dt_wait_for dt__gone "$p" --timeout 5 || dt_fail "host $1's daemon survived kill -9"
}
# the CLI, from host 2's namespace (the root namespace cannot reach the test bed)
jc() {
  "$DT_NETNS" exec 2 "$DT_BIN_DIR/dtrain" --addr "${addrs[0]}" --token-file "$DT_TEST_TMP/token" "$@"
}
progress() { # JOB STEPS: wait for STEPS more steps, and for the job to be running still
  jobs_wait_step_past "$1" $(($(jobs_step "$1") + $2))
  [[ $(jobs_state "$1") == running ]] || dt_fail "job $1 ended too early: $(jc status "$1" 2>&1)"
}

for i in 0 1 2; do host_start "$i"; done
for i in 0 1 2; do dt_wait_file "$DT_TEST_TMP/h$i.ready" --timeout 30 || dt_fail "host $i never formed"; done
dt_on_exit "for p in \$(pgrep -x dtraind); do kill -CONT \$p; done 2>/dev/null"

jobs_spec "$DT_TEST_TMP/chaos.json" 4000 96 ', "checkpoint": {"save_freq": 40, "keep": 2},
  "fault_tolerance": {"max_restarts": 10, "rejoin_timeout_s": 120}'
sed -i 's/"shuffle": false/"shuffle": true/' "$DT_TEST_TMP/chaos.json"
t0=$(dt__now_ms)
jc submit "$DT_TEST_TMP/chaos.json" --watch >/dev/null || dt_fail "the fault-free job 1 failed"
echo "fault-free run on 3 hosts: $(ms_since "$t0") ms"
ref=$(jc status 1 --json | dt_json_get weights_hashes.0)
[[ -n $ref ]] || dt_fail "job 1 has no weights hash"

jc submit "$DT_TEST_TMP/chaos.json" >/dev/null
jc watch 2 --json >"$DT_TEST_TMP/watch.jsonl" 2>"$DT_TEST_TMP/watch.err" &
watcher=$!
jobs_wait_state 2 running 30
t_all=$(dt__now_ms)

for w in 1 2; do
  progress 2 100
  host_kill "$w"
  t=$(dt__now_ms)
  jobs_wait_state 2 restarting 10
  detect=$(ms_since "$t")
  sleep 3
  host_start "$w"
  jobs_wait_state 2 running 60
  echo "kill -9 of worker:$w, started again after 3 s: restarting after $detect ms, running again after $(ms_since "$t") ms"
done

progress 2 100
host_kill 0
t=$(dt__now_ms)
sleep 7
host_start 0
dt_wait_file "$DT_TEST_TMP/h0.ready" --timeout 60 || dt_fail "the chief did not come back"
jobs_wait_state 2 running 60
echo "kill -9 of the chief, started again after 7 s: running again after $(ms_since "$t") ms"

progress 2 100
p1=$(host_pid 1)
lines_before=$(wc -l <"$DT_TEST_TMP/h1.log")
kill -STOP "$p1"
t=$(dt__now_ms)
jobs_wait_state 2 restarting 10
detect=$(ms_since "$t")
left=$((30000 - $(ms_since "$t")))
((left <= 0)) || sleep "$(awk -v ms="$left" 'BEGIN { printf "%.3f", ms / 1000 }')"
kill -CONT "$p1"
t_cont=$(dt__now_ms)
jobs_wait_state 2 running 60
echo "SIGSTOP of worker:1 for 30 s: restarting after $detect ms, running again $(ms_since "$t_cont") ms after SIGCONT"

jobs_wait_state 2 succeeded 300
echo "job 2 succeeded $(ms_since "$t_all") ms after it started running"
wait "$watcher" || dt_fail "the watcher did not end with success: $(tail -3 "$DT_TEST_TMP/watch.err")"
jobs_expect_weights 2 4 "$ref" 3 "after the chaos vs the fault-free run"
if tail -n +"$((lines_before + 1))" "$DT_TEST_TMP/h1.log" | grep "worker:0 .* is dead"; then
  dt_fail "the woken worker:1 called the live chief dead"
fi
dt_assert_contains "$DT_TEST_TMP/h1.log" "this daemon did not run for 3[0-9]\\.[0-9] s" "worker:1 saw its own pause"
# The chief's log since its restart: the stopped worker called dead once, nobody else.
dt_assert_eq "$(grep -c "is dead" "$DT_TEST_TMP/h0.log")" 1 "deaths the restarted chief saw"
dt_assert_contains "$DT_TEST_TMP/h0.log" "worker:1 .* is dead" "the chief names the stopped worker"
dt_assert_contains "$DT_TEST_TMP/watch.err" "restarted; following job 2 on" "watch followed the chief's restart"
echo "ok: chaos in 3 network namespaces; the fault-free run's final weights"
