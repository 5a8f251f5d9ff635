#!/usr/bin/env bash
# local-cluster.sh - N dtraind daemons on 127.0.0.1, one per port, as workers 0..N-1 (no chief:
# worker 0 is the chief), for trying dtrain and for tests.
#
#   scripts/local-cluster.sh N [--base-port P] [--dir DIR] [--token-file F] [--timeout S] [--bind]
#       [-- DTRAIND_FLAGS...]
#   scripts/local-cluster.sh stop [--dir DIR] [--timeout S]
#   scripts/local-cluster.sh status [--dir DIR]
#
#   --base-port P   worker I listens on 127.0.0.1:P+I (default: a free run of N ports)
#   --dir DIR       logs (worker-I.log), pid files, TF_CONFIGs, state dirs (default build/local-cluster)
#   --token-file F  the shared token (default: a fresh random one in DIR/token, mode 0600)
#   --timeout S     start: wait up to S s for every daemon's --ready-file (0: don't wait; default 60)
#                   stop: SIGTERM, then SIGKILL after S s (default 10)
#   --bind          worker I runs on CPU I only (taskset), as mpirun binds rank I to core I when
#                   there are at least as many CPUs as ranks; with fewer CPUs than N, no binding
# Environment: DT_BIN_DIR (default ./bin) holds dtraind and dtrain.
#
# Worker I runs as: TF_CONFIG=<DIR/worker-I.tf_config.json> dtraind --state-dir DIR/worker-I
#   --token-file F --ready-file DIR/worker-I.ready [--threads T] [DTRAIND_FLAGS...], in its own
#   session (setsid), where T = max(1, (CPUs - 1) / N) unless DTRAIND_FLAGS has --threads,
#   so it outlives this script and the terminal; `stop` ends it.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN_DIR=${DT_BIN_DIR:-$ROOT/bin}
DIR=$ROOT/build/local-cluster
PY=/usr/bin/python3
[[ -x $PY ]] || PY=python3

die() {
  echo "local-cluster: $*" >&2
  exit 1
}
usage() {
  sed -n '5,8s/^# \{0,1\}//p' "$0" >&2
  exit 2
}

# Does the pid in FILE run dtraind? (Guards against a stale pid file whose pid was reused.)
pid_alive() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q dtraind
}

# Is PID running (not gone, not a zombie waiting to be reaped)?
running() {
  kill -0 "$1" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]
}

# A run of N consecutive free ports on 127.0.0.1: all bound at once, then released.
free_run() {
  "$PY" - "$1" <<'EOF'
import random, socket, sys
n = int(sys.argv[1])
for _ in range(200):
    base = random.randrange(20000, 60000 - n)
    socks = []
    try:
        for p in range(base, base + n):
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        for s in socks:
            s.close()
    print(base)
    sys.exit(0)
sys.exit("no run of %d free ports found" % n)
EOF
}

cmd_start() {
  local n=$1 base="" token="" timeout=60 bind=0 extra=()
  shift
  # shellcheck disable=SC2015  # either test failing means a bad value
  [[ $n =~ ^[0-9]{1,2}$ ]] && ((10#$n >= 1 && 10#$n <= 64)) || die "N must be 1..64, got '$n'"
  n=$((10#$n))
  while (($#)); do
    case $1 in
    --base-port) base=${2:?--base-port needs a value}; shift 2 ;;
    --dir) DIR=${2:?--dir needs a value}; shift 2 ;;
    --token-file) token=${2:?--token-file needs a value}; shift 2 ;;
    --timeout) timeout=${2:?--timeout needs a value}; shift 2 ;;
    --bind) bind=1; shift ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown option '$1' (dtraind flags go after --)" ;;
    esac
  done
  [[ $timeout =~ ^[0-9]+$ ]] || die "--timeout must be whole seconds, got '$timeout'"
  [[ -x $BIN_DIR/dtraind ]] || die "no daemon at $BIN_DIR/dtraind: run 'make' (or set DT_BIN_DIR)"
  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd)
  local f
  for f in "$DIR"/worker-*.pid; do
    [[ -e $f ]] || continue
    pid_alive "$f" && die "a cluster is already running in $DIR: '$0 stop --dir $DIR' first"
  done
  rm -f "$DIR"/worker-*.pid "$DIR"/worker-*.ready
  if [[ -z $base ]]; then
    base=$(free_run "$n") || die "could not find $n free ports"
  fi
  # shellcheck disable=SC2015
  [[ $base =~ ^[0-9]{1,5}$ ]] && base=$((10#$base)) && ((base >= 1 && base + n - 1 <= 65535)) ||
    die "--base-port $base: ports $base..$((base + n - 1)) are not all in 1..65535"
  if [[ -z $token ]]; then
    token=$DIR/token
    (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$token")
  fi
  [[ -r $token ]] || die "token file $token is not readable"
  token=$(cd "$(dirname "$token")" && pwd)/$(basename "$token")

  # TF_CONFIG: the same cluster for all, task index I for worker I.
  local i addrs=() cluster
  for ((i = 0; i < n; i++)); do addrs+=("\"127.0.0.1:$((base + i))\""); done
  cluster="{\"worker\":[$(IFS=,; echo "${addrs[*]}")]}"

  # N daemons share this host's CPUs: give each its share of compute threads, unless the
  # caller chose (dtraind's own default, the CPUs less one, is meant for one daemon per host).
  local threads=()
  if [[ " ${extra[*]:-} " != *" --threads"* ]]; then
    local cpus
    cpus=$(nproc)
    threads=(--threads $(((cpus - 1) / n > 0 ? (cpus - 1) / n : 1)))
  fi

  local pin=()
  if ((bind)); then
    if ((n <= $(nproc))) && command -v taskset >/dev/null; then
      pin=(taskset -c)
    else
      echo "local-cluster: --bind: $n workers, $(nproc) CPUs: not binding" >&2
    fi
  fi

  # Stop the ones already started if a later one cannot start.
  trap 'rc=$?; if ((rc)); then echo "local-cluster: start failed; stopping the daemons" >&2; cmd_stop --dir "$DIR" >/dev/null 2>&1 || true; fi' EXIT
  for ((i = 0; i < n; i++)); do
    local tf="{\"cluster\":$cluster,\"task\":{\"type\":\"worker\",\"index\":$i}}"
    echo "$tf" >"$DIR/worker-$i.tf_config.json"
    mkdir -p "$DIR/worker-$i"
    TF_CONFIG=$tf setsid ${pin[@]+"${pin[@]}" $i} "$BIN_DIR/dtraind" --state-dir "$DIR/worker-$i" --token-file "$token" \
      --ready-file "$DIR/worker-$i.ready" "${threads[@]}" "${extra[@]}" >"$DIR/worker-$i.log" 2>&1 </dev/null &
    echo $! >"$DIR/worker-$i.pid"
  done

  if ((timeout > 0)); then
    local deadline=$((SECONDS + timeout)) waiting next_note=$((SECONDS + 5))
    while true; do
      waiting=()
      for ((i = 0; i < n; i++)); do
        [[ -e $DIR/worker-$i.ready ]] && continue
        # The pid is the child just started, not a stale one: pid_alive's look at its command
        # line would race with setsid's exec of dtraind under load and call it gone.
        if ! running "$(cat "$DIR/worker-$i.pid")"; then
          echo "local-cluster: worker $i exited before the cluster formed; last lines of its log:" >&2
          tail -n 20 "$DIR/worker-$i.log" >&2 || true
          exit 1
        fi
        waiting+=("$i")
      done
      ((${#waiting[@]} == 0)) && break
      if ((SECONDS >= deadline)); then
        echo "local-cluster: workers ${waiting[*]} not ready after ${timeout}s; last lines of worker ${waiting[0]}'s log:" >&2
        tail -n 20 "$DIR/worker-${waiting[0]}.log" >&2 || true
        exit 1
      fi
      if ((SECONDS >= next_note)); then
        echo "local-cluster: waiting for workers ${waiting[*]} to be ready" >&2
        next_note=$((SECONDS + 5))
      fi
      sleep 0.1
    done
  fi
  trap - EXIT

  echo "local cluster: $n workers in $DIR$( ((timeout > 0)) && echo ", cluster formed")"
  for ((i = 0; i < n; i++)); do
    printf '  worker %d%s: 127.0.0.1:%d  pid %s  log %s\n' "$i" "$( ((i == 0)) && echo " (chief)")" \
      $((base + i)) "$(cat "$DIR/worker-$i.pid")" "$DIR/worker-$i.log"
  done
  echo "TF_CONFIG cluster: $cluster"
  echo "token file:        $token"
  echo "use it:  $BIN_DIR/dtrain --addr 127.0.0.1:$base --token-file $token cluster"
  echo "     or: export DTRAIN_ADDR=127.0.0.1:$base DTRAIN_TOKEN_FILE=$(printf %q "$token")"
  echo "         $BIN_DIR/dtrain submit JOB.json --watch"
  echo "stop:    $0 stop --dir $DIR"
}

cmd_stop() {
  local timeout=10 f pid pids=()
  while (($#)); do
    case $1 in
    --dir) DIR=${2:?--dir needs a value}; shift 2 ;;
    --timeout) timeout=${2:?--timeout needs a value}; shift 2 ;;
    *) die "stop: unknown option '$1'" ;;
    esac
  done
  [[ $timeout =~ ^[0-9]+$ ]] || die "--timeout must be whole seconds, got '$timeout'"
  for f in "$DIR"/worker-*.pid; do
    [[ -e $f ]] || continue
    if pid_alive "$f"; then
      pid=$(cat "$f")
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  if ((${#pids[@]} == 0)); then
    rm -f "$DIR"/worker-*.pid "$DIR"/worker-*.ready
    echo "local-cluster: nothing running in $DIR"
    return 0
  fi
  local deadline=$((SECONDS + timeout)) left
  while true; do
    left=()
    for pid in "${pids[@]}"; do running "$pid" && left+=("$pid"); done
    ((${#left[@]} == 0)) && break
    if ((SECONDS >= deadline)); then
      echo "local-cluster: pids ${left[*]} still running ${timeout}s after SIGTERM; sending SIGKILL" >&2
      kill -KILL "${left[@]}" 2>/dev/null || true
      break
    fi
    sleep 0.1
  done
  rm -f "$DIR"/worker-*.pid "$DIR"/worker-*.ready
  echo "local-cluster: stopped ${#pids[@]} daemons in $DIR"
}

cmd_status() {
  local f i running=0 total=0
  while (($#)); do
    case $1 in
    --dir) DIR=${2:?--dir needs a value}; shift 2 ;;
    *) die "status: unknown option '$1'" ;;
    esac
  done
  for f in "$DIR"/worker-*.pid; do
    [[ -e $f ]] || continue
    i=${f##*/worker-}
    i=${i%.pid}
    total=$((total + 1))
    if pid_alive "$f"; then
      running=$((running + 1))
      echo "  worker $i: pid $(cat "$f") running$([[ -e $DIR/worker-$i.ready ]] && echo ", ready")"
    else
      echo "  worker $i: not running (log $DIR/worker-$i.log)"
    fi
  done
  echo "local-cluster: $running of $total daemons running in $DIR"
  ((total > 0 && running == total))
}

case ${1:-} in
stop) shift; cmd_stop "$@" ;;
status) shift; cmd_status "$@" ;;
[0-9]*) cmd_start "$@" ;;
*) usage ;;
esac
