# shellcheck shell=bash
# shellcheck disable=SC2034  # CL_ADDR, CL_TOKEN, PB_MPI_ARGS are set for the sourcing script
# peers-lib.sh - what allreduce-vs-peers.sh and train-vs-ddp.sh share: the process and namespace
# bookkeeping (every process started is stopped on exit, the namespaces brought up are removed),
# bounded waits, and starting a dtrain cluster of R workers on loopback or on netns hosts.
# Source it after setting PB_NAME (the prefix of messages); it sets ROOT, BIN_DIR, PY, NETNS and
# installs the EXIT/INT/TERM traps. A caller sets WORK (its scratch directory) and KEEP_WORK=1 to
# keep it.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN_DIR=${DT_BIN_DIR:-$ROOT/bin}
PY=/usr/bin/python3
[[ -x $PY ]] || PY=python3
NETNS=$ROOT/scripts/netns-cluster.sh
export DT_NETNS_PREFIX=${DT_NETNS_PREFIX:-dtbench}

die() {
  echo "$PB_NAME: $*" >&2
  exit 2
}
note() { echo "$PB_NAME: $*" >&2; }

PIDS=()        # every background process started (stopped by pb_cleanup)
NETNS_OWNED=0  # 1 while namespaces we brought up exist
LOCAL_DIRS=()  # local-cluster.sh directories with daemons that may still run
WORK=""
KEEP_WORK=0

# pb_stop_pids PID...: SIGTERM, SIGKILL after 5 s, then reap.
# A PID in PIDS is often a background subshell (`pb_on_host ... &`) whose child (timeout, then
# the rank) would outlive it, so the whole tree is signalled.
pb__tree() {
  local p c
  for p in "$@"; do
    echo "$p"
    for c in $(pgrep -P "$p" 2>/dev/null); do pb__tree "$c"; done
  done
}

pb_stop_pids() {
  local p left deadline=$((SECONDS + 5)) tree
  (($#)) || return 0
  mapfile -t tree < <(pb__tree "$@")
  set -- "${tree[@]}"
  kill -TERM "$@" 2>/dev/null || true
  while ((SECONDS < deadline)); do
    left=0
    for p in "$@"; do
      kill -0 "$p" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) != Z ]] && left=1
    done
    ((left)) || break
    sleep 0.1
  done
  kill -KILL "$@" 2>/dev/null || true
  wait "$@" 2>/dev/null || true
}

# pb_wait_group PID...: wait for all; at the first that fails, stop the others (a rank that died
# leaves its peers waiting for it until their own timeouts). 1 when any failed.
pb_wait_group() {
  local left=("$@") p rest rc=0
  while ((${#left[@]})); do
    rest=()
    for p in "${left[@]}"; do
      if kill -0 "$p" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) != Z ]]; then
        rest+=("$p")
      else
        wait "$p" || rc=1 # bash keeps the status of a background child it has reaped
      fi
    done
    left=("${rest[@]}")
    if ((rc)); then
      pb_stop_pids "${left[@]}"
      break
    fi
    ((${#left[@]} == 0)) || sleep 0.1
  done
  return $rc
}

# pb_cleanup: stop everything started so far and remove our namespaces (between runs and on exit).
pb_cleanup() {
  local d
  pb_stop_pids "${PIDS[@]}"
  PIDS=()
  for d in "${LOCAL_DIRS[@]}"; do
    "$ROOT/scripts/local-cluster.sh" stop --dir "$d" --timeout 5 >/dev/null 2>&1 || true
  done
  LOCAL_DIRS=()
  if ((NETNS_OWNED)); then
    "$NETNS" down >/dev/null 2>&1 || note "could not remove namespaces $DT_NETNS_PREFIX-*"
    NETNS_OWNED=0
  fi
}
pb__on_exit() {
  local rc=$?
  pb_cleanup
  if [[ -n $WORK && $KEEP_WORK == 0 ]]; then rm -rf "$WORK"; fi
  exit $rc
}
trap pb__on_exit EXIT
trap 'exit 130' INT TERM

# pb_have_torch: does $PY have torch? (Found, not imported: an import costs seconds.)
pb_have_torch() {
  "$PY" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)' 2>/dev/null
}

# pb_netns_check: die unless we may bring up namespaces with our prefix.
pb_netns_check() {
  [[ $(id -u) -eq 0 ]] || die "--net netns needs root (network namespaces); use --net loopback"
  command -v tc >/dev/null || die "'tc' not found: apt-get install iproute2"
  if "$NETNS" status >/dev/null 2>&1; then
    die "namespaces with prefix $DT_NETNS_PREFIX exist: '$NETNS down' (DT_NETNS_PREFIX=$DT_NETNS_PREFIX) first"
  fi
}

# wants IMPL: is IMPL among --only ($ONLY, a comma list)?
wants() { [[ ,$ONLY, == *",$1,"* ]]; }

# pb_check_dtrain_and_nets: HAVE_DTRAIN=1 when dtrain is wanted and built (else a note: its
# columns say n/a), and the netns checks when NETS has netns.
pb_check_dtrain_and_nets() {
  if wants dtrain; then
    if [[ -x $BIN_DIR/dtrain && -x $BIN_DIR/dtraind ]]; then HAVE_DTRAIN=1; else
      note "no $BIN_DIR/dtrain or dtraind (run make): dtrain columns n/a"
    fi
  fi
  local n
  for n in "${NETS[@]}"; do [[ $n != netns ]] || pb_netns_check; done
}

# pb_netns_up R RATE: R shaped hosts; records the link check of host 1 -> host 0 (or none).
pb_netns_up() {
  "$NETNS" up "$1" "$2" >"$WORK/netns-up-$1.log" 2>&1 ||
    die "netns-cluster.sh up $1 $2 failed: $(tail -n 2 "$WORK/netns-up-$1.log")"
  NETNS_OWNED=1
}

# pb_link_check TAG: TCP payload rate of one 32 MB transfer host 1 -> host 0 of the test bed, in
# Gbit/s ("n/a" when it fails), so a table can say what the shaped link really carries.
pb_link_check() {
  local f=$WORK/link-check-$1.out pid
  "$NETNS" exec 0 timeout 20 "$PY" -c '
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5299))
s.listen(1)
print("listening", flush=True)
c, _ = s.accept()
got, t0 = 0, None
while True:
    b = c.recv(1 << 20)
    if not b:
        break
    if t0 is None:
        t0 = time.perf_counter()
    got += len(b)
print("%.3f" % (got * 8 / (time.perf_counter() - t0) / 1e9))
' "$(pb_addr netns 0)" >"$f" 2>/dev/null &
  pid=$!
  PIDS+=("$pid")
  local deadline=$((SECONDS + 20))
  until grep -q listening "$f" 2>/dev/null || ((SECONDS >= deadline)); do sleep 0.05; done
  "$NETNS" exec 1 timeout 20 "$PY" -c '
import socket, sys, time
for attempt in range(50):
    try:
        c = socket.create_connection((sys.argv[1], 5299), timeout=10)
        break
    except OSError:
        time.sleep(0.2)
else:
    sys.exit("no listener")
buf = bytes(1 << 20)
for _ in range(32):
    c.sendall(buf)
c.close()
' "$(pb_addr netns 0)" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  tail -n 1 "$f" | grep -E '^[0-9.]+$' || echo n/a
}

# pb_cpu_idle: the share of all CPUs idle over the next half second, in percent.
pb_cpu_idle() {
  local a b
  a=$(awk '/^cpu /{print $5 + $6, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat)
  sleep 0.5
  b=$(awk '/^cpu /{print $5 + $6, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " ");
    t = y[2] - x[2]; printf "%d\n", (t > 0 ? 100 * (y[1] - x[1]) / t : 100) }'
}

# pb_settle SECONDS: on a shared machine, wait up to SECONDS for the CPUs to be at least 80% idle
# (other people's work skews every figure); print the idle share measured last.
pb_settle() {
  local deadline=$((SECONDS + $1)) idle
  while true; do
    idle=$(pb_cpu_idle)
    if ((idle >= 80 || SECONDS >= deadline)); then break; fi
  done
  echo "$idle"
}

# pb_wait_files SECONDS FILE...: wait for every FILE to exist; 1 on timeout.
pb_wait_files() {
  local t=$1 f deadline
  shift
  deadline=$((SECONDS + t))
  for f in "$@"; do
    until [[ -e $f ]]; do
      ((SECONDS < deadline)) || return 1
      sleep 0.1
    done
  done
}

# pb_free_port: a free TCP port on 127.0.0.1.
pb_free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# pb_addr NET I: rank I's address on that network (loopback or netns).
pb_addr() {
  if [[ $1 == loopback ]]; then echo 127.0.0.1; else "$NETNS" addr "$2"; fi
}

# pb_on_host NET I CMD...: run CMD on rank I's host.
pb_on_host() {
  local net=$1 i=$2
  shift 2
  if [[ $net == loopback ]]; then "$@"; else "$NETNS" exec "$i" "$@"; fi
}

# pb_dtrain_up NET R DIR: a formed dtrain cluster of R workers; sets CL_ADDR (worker 0, the chief)
# and CL_TOKEN. 1 (reason on stderr) when it does not form within 60 s. pb_dtrain_down NET DIR.
# PB_BIND=1: on loopback, worker I runs on CPU I when R <= CPUs (local-cluster.sh --bind), as
# mpirun binds its ranks.
CL_ADDR="" CL_TOKEN="" CL_PIDS=() PB_BIND=${PB_BIND:-0}
pb_dtrain_up() {
  local net=$1 r=$2 dir=$3 i cluster="" readies=()
  mkdir -p "$dir"
  CL_PIDS=()
  CL_TOKEN=$dir/token
  if [[ $net == loopback ]]; then
    LOCAL_DIRS+=("$dir")
    local bind=()
    ((PB_BIND)) && bind=(--bind)
    "$ROOT/scripts/local-cluster.sh" "$r" --dir "$dir" --timeout 60 ${bind[@]+"${bind[@]}"} \
      >"$dir/start.log" 2>&1 || {
      note "dtrain: a local cluster of $r did not form: $(tail -n 3 "$dir/start.log" | tr '\n' ' ')"
      return 1
    }
    CL_ADDR=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["cluster"]["worker"][0])' \
      "$dir/worker-0.tf_config.json")
    return 0
  fi
  (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$CL_TOKEN")
  for ((i = 0; i < r; i++)); do cluster+="${cluster:+,}\"$(pb_addr netns "$i"):7070\""; done
  CL_ADDR=$(pb_addr netns 0):7070
  for ((i = 0; i < r; i++)); do
    mkdir -p "$dir/h$i"
    "$NETNS" exec "$i" env TF_CONFIG="{\"cluster\":{\"worker\":[$cluster]},\"task\":{\"type\":\"worker\",\"index\":$i}}" \
      "$BIN_DIR/dtraind" --token-file "$CL_TOKEN" --state-dir "$dir/h$i" --ready-file "$dir/h$i.ready" \
      >"$dir/h$i.log" 2>&1 </dev/null &
    CL_PIDS+=($!)
    PIDS+=($!)
    readies+=("$dir/h$i.ready")
  done
  pb_wait_files 60 "${readies[@]}" || {
    note "dtrain: $r daemons on netns hosts did not form in 60 s; see $dir/h*.log"
    pb_stop_pids "${CL_PIDS[@]}"
    return 1
  }
}
pb_dtrain_down() {
  if [[ $1 == loopback ]]; then
    "$ROOT/scripts/local-cluster.sh" stop --dir "$2" --timeout 5 >/dev/null 2>&1 || true
  else
    pb_stop_pids "${CL_PIDS[@]}"
  fi
}

# pb_mpi_args NET R DIR: mpirun's arguments (into the array PB_MPI_ARGS) for R ranks, one per
# host, over OpenMPI's TCP transport. On netns hosts mpirun must run on host 0; it starts the other
# ranks through netns-rsh.sh (ip netns exec where it would ssh).
# yield_when_idle: a rank waiting for data yields its core instead of spinning. Spinning ranks
# starve the kernel's network work on a machine with few cores (measured on 2 cores, netns, R=2:
# a 4 KB all-reduce took 8.8 ms spinning, 0.11 ms yielding). Oversubscribed runs yield anyway.
PB_MPI_ARGS=()
pb_mpi_args() {
  local net=$1 r=$2 dir=$3 i
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  if [[ $net == loopback ]]; then
    PB_MPI_ARGS=(-np "$r" --oversubscribe --mca btl "tcp,self" --mca btl_tcp_if_include lo
      --mca oob_tcp_if_include lo --mca mpi_yield_when_idle 1)
    return 0
  fi
  export DT_OMPI_TMP=$WORK/ompi-tmp  # netns-rsh.sh: one session directory base per host
  : >"$dir/hostfile"
  for ((i = 0; i < r; i++)); do echo "$(pb_addr netns "$i") slots=1" >>"$dir/hostfile"; done
  PB_MPI_ARGS=(-np "$r" --hostfile "$dir/hostfile" --map-by node
    --mca plm_rsh_agent "$ROOT/scripts/bench/netns-rsh.sh" -x DT_NETNS_PREFIX -x DT_OMPI_TMP
    --mca btl "tcp,self" --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0
    --mca mpi_yield_when_idle 1)
  if [[ -n ${DT_NETNS_SUBNET:-} ]]; then PB_MPI_ARGS+=(-x DT_NETNS_SUBNET); fi
}
