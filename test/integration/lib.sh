# shellcheck shell=bash
# lib.sh - helpers for integration tests: `source "$(dirname "$0")/lib.sh"` at the top of a test.
#
# Sourcing turns on `set -euo pipefail` (a failing command fails the test, and the log says which
# line), fills in DT_SRC_DIR / DT_BIN_DIR / DT_TEST_TMP when the test runs outside the runner, and
# installs an EXIT trap that, whatever happens:
#   - on failure, prints the tail of every daemon/helper log started with dt_start_daemon / dt_bg;
#   - stops every process started with dt_start_daemon / dt_bg (SIGTERM, SIGKILL after 3 s);
#   - runs `netns-cluster.sh down` when the test brought namespaces up with dt_netns_up.
# A watchdog sends SIGTERM to the test 5 s before its `# timeout: N` (the runner SIGKILLs at N,
# and a SIGKILLed test cleans nothing), so cleanup runs even when a test hangs.
#
# Exit codes: 0 pass, 1 fail (dt_fail), 7 skip (dt_skip: the runner shows the "SKIP: ..." line).
#
# Example:
#   source "$(dirname "$0")/lib.sh"
#   mapfile -t ports < <(dt_free_ports 2)
#   tf=$(dt_tfconfig_json worker 0 "worker=127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}")
#   dt_start_daemon w0 TF_CONFIG="$tf" -- --ready-file "$DT_TEST_TMP/w0.ready"
#   dt_wait_file "$DT_TEST_TMP/w0.ready" --timeout 20 || dt_fail "worker 0 never became ready"
#   dt_assert_contains "$DT_TEST_TMP/w0.log" "cluster formed" "worker 0 log"

set -euo pipefail

DT_SRC_DIR=${DT_SRC_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
DT_BIN_DIR=${DT_BIN_DIR:-$DT_SRC_DIR/bin}
if [[ -z ${DT_TEST_TMP:-} ]]; then
  DT_TEST_TMP=$(mktemp -d "${TMPDIR:-/tmp}/dt-itest.XXXXXX")
  DT__OWN_TMP=1
fi
export DT_SRC_DIR DT_BIN_DIR DT_TEST_TMP

DT__PIDS=()        # every process started by dt_bg / dt_start_daemon
DT__NAMES=()       # their names (log: $DT_TEST_TMP/NAME.log), same order
DT__NETNS_UP=0     # 1 once dt_netns_up ran: the EXIT trap takes the test bed down
DT__REPORTED=0     # 1 once dt_fail printed the logs
DT__WATCHDOG=""
DT__ON_EXIT=()     # commands registered with dt_on_exit
DT_NETNS=$DT_SRC_DIR/scripts/netns-cluster.sh

# ---- failing, skipping ---------------------------------------------------------------------

# dt_fail MSG: print MSG and the tail of every log, then exit 1.
dt_fail() {
  echo "FAIL: $*" >&2
  dt__dump_logs
  DT__REPORTED=1
  exit 1
}

# dt_skip MSG: exit 7 (skipped) with the reason the runner shows.
dt_skip() {
  echo "SKIP: $*"
  exit 7
}

dt_require_root() { [[ $(id -u) -eq 0 ]] || dt_skip "needs root (network namespaces)"; }

# dt_require_cmd CMD...: skip unless every CMD is on PATH.
dt_require_cmd() {
  local c
  for c in "$@"; do command -v "$c" >/dev/null || dt_skip "'$c' not installed"; done
}

dt__dump_logs() {
  local n f
  for n in "${DT__NAMES[@]}"; do
    f=$DT_TEST_TMP/$n.log
    [[ -f $f ]] || continue
    echo "---- last 40 lines of $f ----" >&2
    tail -n 40 "$f" >&2 || true
  done
}

# ---- assertions ----------------------------------------------------------------------------

# dt_assert_eq ACTUAL EXPECTED MSG
dt_assert_eq() {
  [[ "$1" == "$2" ]] || dt_fail "${3:-values differ}: expected '$2', got '$1'"
}

# dt_assert_contains FILE|STRING PATTERN MSG: PATTERN is an extended regex (grep -E). The first
# argument is read as a file when such a file exists, else matched as a string.
dt_assert_contains() {
  local src=$1 pat=$2 msg=${3:-pattern not found}
  if [[ -f $src ]]; then
    grep -E -q -- "$pat" "$src" || {
      echo "---- last 20 lines of $src ----" >&2
      tail -n 20 "$src" >&2
      dt_fail "$msg: /$pat/ not found in $src"
    }
  else
    grep -E -q -- "$pat" <<<"$src" || dt_fail "$msg: /$pat/ not found in '$src'"
  fi
}

# ---- waiting -------------------------------------------------------------------------------

dt__now_ms() {
  local t=${EPOCHREALTIME/[.,]/}
  echo $((t / 1000))
}

# dt_wait_for CMD... [--timeout S]: run CMD every 0.1 s until it succeeds (return 0) or S seconds
# (default 10, fractions allowed) have passed (return 1, with a line on stderr). CMD should be quick;
# it is not interrupted. `--timeout S` may also come first.
dt_wait_for() {
  local timeout=10 args=()
  while (($#)); do
    if [[ $1 == --timeout && $# -ge 2 ]]; then
      timeout=$2
      shift 2
    else
      args+=("$1")
      shift
    fi
  done
  ((${#args[@]})) || dt_fail "dt_wait_for: no command"
  local deadline
  deadline=$(($(dt__now_ms) + $(awk -v t="$timeout" 'BEGIN { printf "%d", t * 1000 }')))
  while true; do
    "${args[@]}" >/dev/null 2>&1 && return 0
    if (($(dt__now_ms) >= deadline)); then
      echo "dt_wait_for: '${args[*]}' still false after ${timeout}s" >&2
      return 1
    fi
    sleep 0.1
  done
}

# dt_wait_file FILE [--timeout S]: wait until FILE exists (see dt_wait_for).
dt_wait_file() {
  local f=$1
  shift
  dt_wait_for test -e "$f" "$@"
}

# ---- ports, TF_CONFIG, JSON ----------------------------------------------------------------

# dt_free_ports N: print N distinct TCP ports that were free on 127.0.0.1, one per line.
# (All N are bound at once and then released, so they differ; something else may take one before
# the test binds it, which is why daemons should prefer port 0 where they can.)
dt_free_ports() {
  local n=$1 r
  for r in "$DT_BIN_DIR/../build/dt_test" "$DT_BIN_DIR/../dt_test" "$DT_SRC_DIR/build/dt_test"; do
    if [[ -x $r ]]; then
      "$r" --free-ports "$n"
      return
    fi
  done
  /usr/bin/python3 -c '
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
for s in socks:
    print(s.getsockname()[1])
' "$n"
}

# dt_tfconfig_json TYPE INDEX JOB=ADDR[,ADDR...]...: print a compact TF_CONFIG, e.g.
#   dt_tfconfig_json worker 1 chief=127.0.0.1:7000 worker=127.0.0.1:7001,127.0.0.1:7002
# -> {"cluster":{"chief":["127.0.0.1:7000"],"worker":["127.0.0.1:7001","127.0.0.1:7002"]},
#     "task":{"type":"worker","index":1}}
# No validation beyond quoting: tests feed bad values on purpose.
dt_tfconfig_json() {
  local type=$1 index=$2 job a list jobs="" addrs=()
  shift 2
  for job in "$@"; do
    IFS=, read -r -a addrs <<<"${job#*=}"
    list=""
    for a in "${addrs[@]}"; do list+="${list:+,}\"$a\""; done
    jobs+="${jobs:+,}\"${job%%=*}\":[$list]"
  done
  printf '{"cluster":{%s},"task":{"type":"%s","index":%s}}\n' "$jobs" "$type" "$index"
}

# dt_tfconfig_workers INDEX ADDR...: TF_CONFIG of worker INDEX in a workers-only cluster.
dt_tfconfig_workers() {
  local index=$1
  shift
  local IFS=,
  dt_tfconfig_json worker "$index" "worker=$*"
}

# dt_json_get PATH [FILE]: print the value at PATH (dots, list indices as numbers: "tasks.0.rank")
# of the JSON in FILE (default stdin). Strings print raw; other values as compact JSON (null,
# true, 3, {"a":1}). Fails when the path is missing. Uses Debian's python3, since jq may be absent
# (the python3 on PATH where there is none: the GPU machine's image).
dt_json_get() {
  local py=/usr/bin/python3
  [[ -x $py ]] || py=python3
  "$py" -c '
import json, sys
doc = json.load(open(sys.argv[2]) if len(sys.argv) > 2 else sys.stdin)
for key in [k for k in sys.argv[1].split(".") if k]:
    doc = doc[int(key)] if isinstance(doc, list) else doc[key]
print(doc if isinstance(doc, str) else json.dumps(doc, separators=(",", ":")))
' "$@"
}

# ---- processes -----------------------------------------------------------------------------

# dt_bg NAME CMD...: run CMD in the background, output in $DT_TEST_TMP/NAME.log; stopped at exit.
# Sets DT_LAST_PID and writes $DT_TEST_TMP/NAME.pid.
dt_bg() {
  local name=$1
  shift
  # Truncate here, append there: the child opens the log later than this function returns.
  : >"$DT_TEST_TMP/$name.log"
  "$@" >>"$DT_TEST_TMP/$name.log" 2>&1 </dev/null &
  DT_LAST_PID=$!
  DT__PIDS+=("$DT_LAST_PID")
  DT__NAMES+=("$name")
  echo "$DT_LAST_PID" >"$DT_TEST_TMP/$name.pid"
}

# dt_start_daemon NAME [VAR=VALUE...] [--] [DTRAIND_ARGS...]: start $DT_BIN_DIR/dtraind in the
# background with the given environment, log in $DT_TEST_TMP/NAME.log; its pid in DT_LAST_PID and
# $DT_TEST_TMP/NAME.pid (see dt_daemon_pid).
dt_start_daemon() {
  local name=$1 envs=()
  shift
  while (($#)) && [[ $1 =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; do
    envs+=("$1")
    shift
  done
  [[ ${1:-} == -- ]] && shift
  [[ -x $DT_BIN_DIR/dtraind ]] || dt_fail "no daemon at $DT_BIN_DIR/dtraind: run make"
  dt_bg "$name" env "${envs[@]}" "$DT_BIN_DIR/dtraind" "$@"
}

# dt_daemon_pid NAME: the pid of a process started with dt_bg / dt_start_daemon.
dt_daemon_pid() { cat "$DT_TEST_TMP/$1.pid"; }

# dt_stop_daemon NAME [TIMEOUT_S]: SIGTERM, wait up to TIMEOUT_S (default 5), then SIGKILL.
# Returns the process's exit status (or 137 when it had to be killed).
dt_stop_daemon() {
  local pid rc=0
  pid=$(dt_daemon_pid "$1")
  kill -TERM "$pid" 2>/dev/null || true
  if ! dt_wait_for dt__gone "$pid" --timeout "${2:-5}"; then
    echo "dt_stop_daemon: $1 (pid $pid) ignored SIGTERM; sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || rc=$?
  return $rc
}

dt__gone() { ! kill -0 "$1" 2>/dev/null || [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) == Z ]]; }

# The direct children of PID (CONFIG_PROC_CHILDREN; else ps).
dt__children() {
  cat /proc/"$1"/task/*/children 2>/dev/null || ps -o pid= --ppid "$1" 2>/dev/null || true
}

# Stop PIDS (and their direct children): SIGTERM, then SIGKILL whatever is left after 3 s.
dt__stop_pids() {
  local p all=()
  for p in "$@"; do
    all+=("$p")
    # shellcheck disable=SC2207
    all+=($(dt__children "$p"))
  done
  ((${#all[@]})) || return 0
  kill -TERM "${all[@]}" 2>/dev/null || true
  local deadline=$(($(dt__now_ms) + 3000)) left
  while (($(dt__now_ms) < deadline)); do
    left=0
    for p in "${all[@]}"; do dt__gone "$p" || left=1; done
    ((left)) || break
    sleep 0.05
  done
  kill -KILL "${all[@]}" 2>/dev/null || true
  for p in "$@"; do wait "$p" 2>/dev/null || true; done
}

# dt_on_exit CMD...: run CMD (through eval) in the EXIT trap, before the processes are stopped;
# for things lib.sh does not track (daemons in their own session, mounts). Its failure is ignored.
dt_on_exit() { DT__ON_EXIT+=("$*"); }

# ---- network namespaces ----------------------------------------------------------------------

# dt_netns_up N [RATE]: bring up a test bed private to this test (prefix dtt<PID>, subnet
# 10.78.<PID % 250>), remembered so the EXIT trap takes it down. First removes test beds left by
# earlier tests that were SIGKILLed (prefix dtt<PID> whose PID no longer runs).
dt_netns_up() {
  dt_require_root
  dt_require_cmd ip
  export DT_NETNS_PREFIX=${DT_NETNS_PREFIX:-dtt$$}
  export DT_NETNS_SUBNET=${DT_NETNS_SUBNET:-10.78.$(($$ % 250))}
  dt__netns_sweep
  DT__NETNS_UP=1
  "$DT_NETNS" up "$@" || dt_fail "netns-cluster.sh up $* failed"
}

dt__netns_sweep() {
  local ns pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^dtt[0-9]+-(br|h[0-9]+)$' || true); do
    pid=${ns#dtt}
    pid=${pid%%-*}
    if [[ ! -d /proc/$pid ]]; then
      echo "lib.sh: removing a test bed left behind by pid $pid" >&2
      DT_NETNS_PREFIX=dtt$pid "$DT_NETNS" down || true
    fi
  done
}

# dt_netns_exec I CMD...: run CMD in test-bed host I.   dt_netns_addr I: host I's address.
dt_netns_exec() { "$DT_NETNS" exec "$@"; }
dt_netns_addr() { "$DT_NETNS" addr "$1"; }

# ---- the EXIT trap and the watchdog --------------------------------------------------------------

dt__cleanup() {
  local rc=$?
  set +e
  trap - ERR
  if ((rc != 0 && rc != 7 && DT__REPORTED == 0)); then
    echo "FAIL: exit status $rc${DT__ERR_AT:+ after a failed command at $DT__ERR_AT}" >&2
    dt__dump_logs
  fi
  local c
  for c in "${DT__ON_EXIT[@]}"; do eval "$c"; done
  # The watchdog (a subshell and its sleep) goes with the rest.
  local pids=(${DT__WATCHDOG:+"$DT__WATCHDOG"} "${DT__PIDS[@]}")
  ((${#pids[@]} == 0)) || dt__stop_pids "${pids[@]}"
  if ((DT__NETNS_UP)); then
    "$DT_NETNS" down || echo "lib.sh: netns-cluster.sh down failed (prefix $DT_NETNS_PREFIX)" >&2
  fi
  [[ -z ${DT__OWN_TMP:-} ]] || rm -rf "$DT_TEST_TMP"
  exit "$rc"
}

# Where set -e stopped the test: "FILE:LINE: COMMAND".
trap 'DT__ERR_AT="$(basename "${BASH_SOURCE[0]:-$0}"):$LINENO: $BASH_COMMAND"' ERR
trap dt__cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# The watchdog: at the test's `# timeout: N` minus 5 s (N defaults to 120, as in the runner),
# SIGTERM the test's children (a foreground command would delay the trap) and then the test.
dt__arm_watchdog() {
  local t=120 line self=$$ script=${BASH_SOURCE[-1]}
  line=$(head -n 15 "$script" 2>/dev/null | grep -m1 -E '^# timeout: [0-9]+' || true)
  [[ -z $line ]] || t=${line##*: }
  ((t > 10)) || return 0
  local mult=${DT_TEST_TIMEOUT_MULT:-1}
  [[ $mult =~ ^[0-9]+$ ]] || mult=1
  (
    trap - EXIT ERR TERM INT
    sleep $((t * mult - 5)) &
    wait $! || exit 0
    echo "FAIL: watchdog: still running after $((t * mult - 5)) s (timeout $((t * mult)) s); stopping" >&2
    for c in $(dt__children "$self"); do [[ $c == "$BASHPID" ]] || kill -TERM "$c" 2>/dev/null; done
    kill -TERM "$self" 2>/dev/null
  ) &
  DT__WATCHDOG=$!
}
dt__arm_watchdog
