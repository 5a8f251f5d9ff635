#!/usr/bin/env bash
# timeout: 90
# kill -9 of a worker is reported by name on every other daemon within 5 s; the survivors stay
# up; the restarted worker rejoins with a new generation; SIGTERM leaves cleanly (exit 0); a
# dead chief is reported by the workers too.
source "$(dirname "$0")/lib.sh"

mapfile -t ports < <(dt_free_ports 3)
addrs=("127.0.0.1:${ports[0]}" "127.0.0.1:${ports[1]}" "127.0.0.1:${ports[2]}")
start() { dt_start_daemon "$1" TF_CONFIG="$(dt_tfconfig_workers "$2" "${addrs[@]}")" -- --ready-file "$DT_TEST_TMP/$1.ready"; }
for i in 0 1 2; do start "w$i" "$i"; done
for i in 0 1 2; do dt_wait_file "$DT_TEST_TMP/w$i.ready" --timeout 20 || dt_fail "worker:$i never formed"; done
gen0=$("$DT_BIN_DIR/dtrain" cluster --addr "${addrs[0]}" --json | dt_json_get generation)

# 1. kill -9 worker:2: both survivors name it within 5 s.
t0=$(dt__now_ms)
kill -9 "$(dt_daemon_pid w2)"
for i in 0 1; do
  dt_wait_for grep -q "worker:2 (${addrs[2]}) is dead" "$DT_TEST_TMP/w$i.log" --timeout 5 ||
    dt_fail "worker:$i did not report worker:2 dead within 5 s"
  echo "worker:$i reported worker:2 dead after $(($(dt__now_ms) - t0)) ms"
done
j=$("$DT_BIN_DIR/dtrain" cluster --addr "${addrs[1]}" --json)
dt_assert_eq "$(dt_json_get tasks.2.state <<<"$j")" dead "worker:2 state seen by worker:1"
for i in 0 1; do kill -0 "$(dt_daemon_pid "w$i")" || dt_fail "worker:$i died with its peer"; done

# 2. restart it: it rejoins, everyone sees it joined, the generation moved on.
start w2b 2
dt_wait_file "$DT_TEST_TMP/w2b.ready" --timeout 10 || dt_fail "restarted worker:2 never rejoined"
dt_wait_for grep -q "worker:2 (${addrs[2]}) rejoined" "$DT_TEST_TMP/w1.log" --timeout 5 || dt_fail "worker:1 did not see worker:2 rejoin"
dt_assert_contains "$DT_TEST_TMP/w0.log" "worker:2 .${addrs[2]}. restarted and rejoined" "chief log"
j=$("$DT_BIN_DIR/dtrain" cluster --addr "${addrs[0]}" --json)
dt_assert_eq "$(dt_json_get tasks.2.state <<<"$j")" joined "worker:2 state after the restart"
gen1=$(dt_json_get generation <<<"$j")
((gen1 > gen0)) || dt_fail "generation did not grow: $gen0 -> $gen1"

# 3. SIGTERM worker:1: exit 0, the chief logs that it left.
kill -TERM "$(dt_daemon_pid w1)"
pid=$(dt_daemon_pid w1)
dt_wait_for dt__gone "$pid" --timeout 5 || dt_fail "worker:1 did not exit on SIGTERM"
wait "$pid" && rc=0 || rc=$?
dt_assert_eq "$rc" 0 "worker:1 exit status after SIGTERM"
dt_wait_for grep -q "worker:1 (${addrs[1]}) left the cluster" "$DT_TEST_TMP/w0.log" --timeout 3 || dt_fail "chief did not log worker:1 leaving"
dt_assert_eq "$("$DT_BIN_DIR/dtrain" cluster --addr "${addrs[0]}" --json | dt_json_get tasks.1.state)" left "worker:1 state"

# 4. kill -9 the chief: worker:2 names it within 5 s and stays up.
t0=$(dt__now_ms)
kill -9 "$(dt_daemon_pid w0)"
dt_wait_for grep -q "worker:0 (${addrs[0]}) is dead" "$DT_TEST_TMP/w2b.log" --timeout 5 || dt_fail "worker:2 did not report the chief dead within 5 s"
echo "worker:2 reported the chief dead after $(($(dt__now_ms) - t0)) ms"
kill -0 "$(dt_daemon_pid w2b)" || dt_fail "worker:2 died with the chief"
# The chief comes back: worker:2 rejoins it.
start w0b 0
dt_wait_for grep -q "rejoined the chief" "$DT_TEST_TMP/w2b.log" --timeout 10 || dt_fail "worker:2 did not rejoin the restarted chief"
echo PASS
