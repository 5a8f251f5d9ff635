#!/usr/bin/env bash
# timeout: 60
# The integration-test helpers of lib.sh: ports, waits, assertions, TF_CONFIG, JSON, and the EXIT
# trap and watchdog that must clean up after a test whatever way it ends.
# shellcheck disable=SC2016  # the child tests' bodies are single-quoted on purpose
source "$(dirname "$0")/lib.sh"
LIB=$DT_SRC_DIR/test/integration/lib.sh
[[ -x /usr/bin/python3 ]] || dt_skip "/usr/bin/python3 not installed (dt_json_get and the port checks use it)"

# --- dt_free_ports: N distinct ports, all bindable on 127.0.0.1 at once ---
# Bound as a server binds (SO_REUSEADDR, so a port in TIME_WAIT counts as free). Another process
# may grab a port between the two steps: that race is inherent, so allow 3 tries.
bindable() {
  /usr/bin/python3 -c '
import socket, sys
socks = []
for p in sys.argv[1:]:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", int(p)))
    socks.append(s)
' "$@"
}
for try in 1 2 3; do
  mapfile -t ports < <(dt_free_ports 5)
  dt_assert_eq "${#ports[@]}" 5 "dt_free_ports 5 line count"
  dt_assert_eq "$(printf '%s\n' "${ports[@]}" | sort -u | wc -l)" 5 "dt_free_ports gives distinct ports"
  bindable "${ports[@]}" 2>/dev/null && break
  ((try < 3)) || dt_fail "ports from dt_free_ports were not all bindable, 3 times in a row: ${ports[*]}"
done
# The fallback (no dt_test binary) as well.
mapfile -t ports < <(DT_BIN_DIR=/nonexistent DT_SRC_DIR=/nonexistent dt_free_ports 3)
dt_assert_eq "$(printf '%s\n' "${ports[@]}" | sort -u | grep -c -E '^[0-9]+$')" 3 "python fallback of dt_free_ports"

# --- dt_wait_for: false times out within its deadline, true returns at once, late truth is seen ---
t0=$(dt__now_ms)
if dt_wait_for false --timeout 1 2>/dev/null; then dt_fail "dt_wait_for false succeeded"; fi
dt=$(($(dt__now_ms) - t0))
((dt >= 950 && dt < 2500)) || dt_fail "dt_wait_for false --timeout 1 took ${dt} ms (want 1000..2500)"
t0=$(dt__now_ms)
dt_wait_for true --timeout 5 || dt_fail "dt_wait_for true failed"
dt=$(($(dt__now_ms) - t0))
((dt < 1000)) || dt_fail "dt_wait_for true took ${dt} ms"
(sleep 0.3 && touch "$DT_TEST_TMP/late") &
dt_wait_file "$DT_TEST_TMP/late" --timeout 5 || dt_fail "dt_wait_file missed a file created after 0.3 s"
dt_wait_for --timeout 2 test -e "$DT_TEST_TMP/late" || dt_fail "dt_wait_for with --timeout first"

# --- TF_CONFIG and JSON helpers ---
tf=$(dt_tfconfig_json worker 1 chief=127.0.0.1:7000 "worker=127.0.0.1:7001,[::1]:7002")
dt_assert_eq "$(dt_json_get cluster.worker.1 <<<"$tf")" "[::1]:7002" "TF_CONFIG worker list"
dt_assert_eq "$(dt_json_get cluster.chief <<<"$tf")" '["127.0.0.1:7000"]' "TF_CONFIG chief list"
dt_assert_eq "$(dt_json_get task <<<"$tf")" '{"type":"worker","index":1}' "TF_CONFIG task"
tf=$(dt_tfconfig_workers 2 a:1 b:2 c:3)
dt_assert_eq "$tf" '{"cluster":{"worker":["a:1","b:2","c:3"]},"task":{"type":"worker","index":2}}' "dt_tfconfig_workers"
echo '{"rank": null, "ok": true}' >"$DT_TEST_TMP/j.json"
dt_assert_eq "$(dt_json_get rank "$DT_TEST_TMP/j.json")" null "dt_json_get null from a file"
if dt_json_get missing "$DT_TEST_TMP/j.json" 2>/dev/null; then dt_fail "dt_json_get of a missing key succeeded"; fi
dt_assert_contains "$DT_TEST_TMP/j.json" '"ok": true' "dt_assert_contains on a file"
dt_assert_contains "one two three" 'tw.' "dt_assert_contains on a string"

# --- child tests: how a test ends, and what its EXIT trap leaves behind ---
# run_child NAME BODY: write a test script that sources lib.sh, run it, leave its output in
# $DT_TEST_TMP/NAME.out and return its exit status.
run_child() {
  local name=$1 body=$2 rc=0 dir=$DT_TEST_TMP
  mkdir -p "$dir/$name"
  # Line 1 shebang, line 2 the optional header ($3), line 3 source, the body from line 4.
  printf '#!/usr/bin/env bash\n%s\nsource %q\n%s\n' "${3:-}" "$LIB" "$body" >"$dir/$name.sh"
  DT_TEST_TMP=$dir/$name bash "$dir/$name.sh" >"$dir/$name.out" 2>&1 || rc=$?
  return $rc
}
gone() { ! kill -0 "$1" 2>/dev/null; }

# A failing test: its background helpers die, and its logs are printed.
rc=0
run_child fail 'dt_on_exit touch "$DT_TEST_TMP/../hook.ran"
dt_bg sleeper sleep 300; echo "$DT_LAST_PID" >"$DT_TEST_TMP/../fail.pid"
echo "helper says hello" >>"$DT_TEST_TMP/sleeper.log"; dt_fail "on purpose"' || rc=$?
dt_assert_eq "$rc" 1 "dt_fail exit status"
pid=$(cat "$DT_TEST_TMP/fail.pid")
dt_wait_for gone "$pid" --timeout 5 || dt_fail "the EXIT trap left background sleep $pid running"
dt_assert_contains "$DT_TEST_TMP/fail.out" "FAIL: on purpose" "dt_fail message"
[[ -e $DT_TEST_TMP/hook.ran ]] || dt_fail "a dt_on_exit hook did not run when the test failed"
dt_assert_contains "$DT_TEST_TMP/fail.out" "helper says hello" "dt_fail prints the tail of each log"

# A passing test: helpers die too, including one that ignores SIGTERM (SIGKILL after 3 s).
rc=0
run_child pass 'dt_bg stubborn bash -c "trap \"\" TERM; echo ready; while :; do sleep 0.1; done"
echo "$DT_LAST_PID" >"$DT_TEST_TMP/../pass.pid"; dt_wait_for grep -q ready "$DT_TEST_TMP/stubborn.log"' || rc=$?
dt_assert_eq "$rc" 0 "a passing child test"
pid=$(cat "$DT_TEST_TMP/pass.pid")
dt_wait_for gone "$pid" --timeout 5 || dt_fail "the EXIT trap left a SIGTERM-ignoring helper $pid running"

# A command failing under set -e is reported with its line.
rc=0
run_child errexit 'x=1
false
echo "not reached"' || rc=$?
dt_assert_eq "$rc" 1 "set -e failure status"
dt_assert_contains "$DT_TEST_TMP/errexit.out" "FAIL: exit status 1 after a failed command at errexit.sh:5: false" "set -e failure report"

# dt_skip: exit 7 with a SKIP: line; dt_assert_eq prints both operands.
rc=0
run_child skip 'dt_skip "no frobnicator"' || rc=$?
dt_assert_eq "$rc" 7 "dt_skip exit status"
dt_assert_contains "$DT_TEST_TMP/skip.out" "^SKIP: no frobnicator" "dt_skip message"
rc=0
run_child neq 'dt_assert_eq apple pear "fruit"' || rc=$?
dt_assert_eq "$rc" 1 "dt_assert_eq failure status"
dt_assert_contains "$DT_TEST_TMP/neq.out" "fruit: expected 'pear', got 'apple'" "dt_assert_eq message"

# The watchdog (multiplier 1 even under make asan): a test stuck in a foreground command past
# (# timeout: 11) - 5 s is stopped, and
# its cleanup still runs.
rc=0
t0=$(dt__now_ms)
DT_TEST_TIMEOUT_MULT=1 run_child hang 'dt_bg sleeper sleep 300; echo "$DT_LAST_PID" >"$DT_TEST_TMP/../hang.pid"
sleep 100' '# timeout: 11' || rc=$?
dt=$(($(dt__now_ms) - t0))
((rc != 0)) || dt_fail "a hung test exited 0"
((dt >= 5500 && dt < 9000)) || dt_fail "the watchdog stopped a '# timeout: 11' test after ${dt} ms (want ~6000)"
dt_assert_contains "$DT_TEST_TMP/hang.out" "watchdog" "watchdog message"
pid=$(cat "$DT_TEST_TMP/hang.pid")
dt_wait_for gone "$pid" --timeout 5 || dt_fail "after the watchdog, background sleep $pid still runs"
echo "lib.sh helpers OK"
