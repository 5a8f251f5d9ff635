#!/usr/bin/env bash
# timeout: 90
# scripts/local-cluster.sh against a stub dtraind (a bash script that records its flags and
# TF_CONFIG, listens on its port and writes its --ready-file): N daemons get the right TF_CONFIGs,
# ports, token and flags; `stop` ends them, SIGKILLing one that ignores SIGTERM; a daemon that dies
# at start makes `start` fail and clean up. When the real bin/dtraind knows --ready-file, a real
# 2-worker cluster must form too.
source "$(dirname "$0")/lib.sh"
LC=$DT_SRC_DIR/scripts/local-cluster.sh
[[ -x /usr/bin/python3 ]] || dt_skip "/usr/bin/python3 not installed"

# Whatever happens, no daemon of ours outlives the test (they run in their own sessions).
stop_all() {
  for d in "$DT_TEST_TMP"/lc-*; do
    [[ -d $d ]] && "$LC" stop --dir "$d" --timeout 2 >/dev/null 2>&1
  done
  return 0
}
dt_on_exit stop_all

# --- the stub daemon ---
STUB=$DT_TEST_TMP/stubbin
mkdir -p "$STUB"
cat >"$STUB/dtraind" <<'EOF'
#!/bin/bash
# Stub dtraind: logs its flags and TF_CONFIG, serves its TF_CONFIG port, writes --ready-file.
# STUB_IGNORE_TERM=1: ignore SIGTERM. STUB_DIE=I: worker I exits 3 at once.
ready=""
for ((a = 1; a <= $#; a++)); do [[ ${!a} == --ready-file ]] && { b=$((a + 1)); ready=${!b}; }; done
echo "ARGS $*"
echo "TF_CONFIG $TF_CONFIG"
index=$(/usr/bin/python3 -c 'import json, os; print(json.loads(os.environ["TF_CONFIG"])["task"]["index"])')
[[ ${STUB_DIE:-x} == "$index" ]] && { echo "dying on purpose"; exit 3; }
port=$(/usr/bin/python3 -c 'import json, os; c = json.loads(os.environ["TF_CONFIG"]); print(c["cluster"]["worker"][c["task"]["index"]].rsplit(":", 1)[1])')
# The listener leaves with the stub, even when the stub is SIGKILLed.
/usr/bin/python3 -c 'import os, socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(4)
while os.getppid() == int(sys.argv[2]): time.sleep(0.1)' "$port" "$$" &
if [[ ${STUB_IGNORE_TERM:-} == 1 ]]; then trap '' TERM; else trap 'echo "got SIGTERM"; kill $!; exit 0' TERM; fi
sleep 0.3
[[ -n $ready ]] && { echo formed >"$ready.tmp"; mv "$ready.tmp" "$ready"; }
while :; do sleep 0.1; done
EOF
chmod +x "$STUB/dtraind"

# --- start 3 stub workers on a chosen base port, with extra flags ---
mapfile -t ports < <(dt_free_ports 1)
base=${ports[0]}
# Make sure base..base+2 are free (dt_free_ports gives one port; the run after it may be taken).
/usr/bin/python3 -c '
import socket, sys
b = int(sys.argv[1])
for p in range(b, b + 3):
    socket.socket().bind(("127.0.0.1", p))
' "$base" 2>/dev/null || dt_skip "ports $base..$((base + 2)) not all free right now"
D=$DT_TEST_TMP/lc-a
DT_BIN_DIR=$STUB "$LC" 3 --base-port "$base" --dir "$D" --timeout 20 -- --log-level debug --rendezvous-timeout 30 \
  >"$DT_TEST_TMP/start.out" 2>&1 || { cat "$DT_TEST_TMP/start.out"; dt_fail "local-cluster.sh 3 failed"; }
cat "$DT_TEST_TMP/start.out"
want_cluster="{\"worker\":[\"127.0.0.1:$base\",\"127.0.0.1:$((base + 1))\",\"127.0.0.1:$((base + 2))\"]}"
grep -q -F "TF_CONFIG cluster: $want_cluster" "$DT_TEST_TMP/start.out" || dt_fail "start did not print the TF_CONFIG cluster"
dt_assert_contains "$DT_TEST_TMP/start.out" "--addr 127.0.0.1:$base " "printed dtrain --addr"
for i in 0 1 2; do
  log=$D/worker-$i.log
  tf=$(sed -n 's/^TF_CONFIG //p' "$log")
  dt_assert_eq "$(dt_json_get cluster <<<"$tf")" "$want_cluster" "worker $i TF_CONFIG cluster"
  dt_assert_eq "$(dt_json_get task <<<"$tf")" "{\"type\":\"worker\",\"index\":$i}" "worker $i TF_CONFIG task"
  dt_assert_contains "$log" "^ARGS --state-dir $D/worker-$i --token-file $D/token --ready-file $D/worker-$i.ready --threads [0-9]+ --log-level debug --rendezvous-timeout 30$" "worker $i flags"
  dt_assert_eq "$(cat "$D/worker-$i.tf_config.json")" "$tf" "worker $i TF_CONFIG file"
  (exec 3<>"/dev/tcp/127.0.0.1/$((base + i))") 2>/dev/null || dt_fail "worker $i does not listen on $((base + i))"
done
dt_assert_eq "$(stat -c %a "$D/token")" 600 "token file mode"
dt_assert_eq "$(wc -c <"$D/token")" 64 "token length (32 random bytes in hex)"
"$LC" status --dir "$D" >/dev/null || dt_fail "status says not all running"

# A second start in the same dir is refused while the first runs.
if DT_BIN_DIR=$STUB "$LC" 2 --dir "$D" >"$DT_TEST_TMP/again.out" 2>&1; then dt_fail "second start in one dir succeeded"; fi
dt_assert_contains "$DT_TEST_TMP/again.out" "already running" "second start"

mapfile -t pids < <(cat "$D"/worker-*.pid)
"$LC" stop --dir "$D" >"$DT_TEST_TMP/stop.out" || dt_fail "stop failed"
dt_assert_contains "$DT_TEST_TMP/stop.out" "stopped 3 daemons" "stop output"
for p in "${pids[@]}"; do dt_wait_for dt__gone "$p" --timeout 5 || dt_fail "pid $p survived stop"; done
for i in 0 1 2; do dt_assert_contains "$D/worker-$i.log" "got SIGTERM" "worker $i stopped by SIGTERM"; done
"$LC" stop --dir "$D" >/dev/null || dt_fail "stop when stopped must succeed"
if "$LC" status --dir "$D" >/dev/null; then dt_fail "status says running after stop"; fi

# --- default free ports, a given token, a daemon ignoring SIGTERM: stop SIGKILLs after --timeout ---
D=$DT_TEST_TMP/lc-b
echo "s3cret" >"$DT_TEST_TMP/tok"
STUB_IGNORE_TERM=1 DT_BIN_DIR=$STUB "$LC" 2 --dir "$D" --token-file "$DT_TEST_TMP/tok" >"$DT_TEST_TMP/startb.out" 2>&1 ||
  { cat "$DT_TEST_TMP/startb.out"; dt_fail "local-cluster.sh 2 (default ports) failed"; }
dt_assert_contains "$D/worker-1.log" "--token-file $DT_TEST_TMP/tok " "given token file passed on"
[[ ! -e $D/token ]] || dt_fail "a token was generated although --token-file was given"
t0=$(dt__now_ms)
"$LC" stop --dir "$D" --timeout 1 >"$DT_TEST_TMP/stopb.out" 2>&1 || dt_fail "stop (SIGKILL path) failed"
dt=$(($(dt__now_ms) - t0))
dt_assert_contains "$DT_TEST_TMP/stopb.out" "SIGKILL" "stop says it used SIGKILL"
((dt < 4000)) || dt_fail "stop --timeout 1 took ${dt} ms"

# --- a worker that dies at start: start fails, says which, and stops the others ---
D=$DT_TEST_TMP/lc-c
if STUB_DIE=1 DT_BIN_DIR=$STUB "$LC" 2 --dir "$D" --timeout 10 >"$DT_TEST_TMP/startc.out" 2>&1; then
  dt_fail "start succeeded although worker 1 died"
fi
dt_assert_contains "$DT_TEST_TMP/startc.out" "worker 1 exited before the cluster formed" "start failure names the worker"
dt_assert_contains "$DT_TEST_TMP/startc.out" "dying on purpose" "start failure shows the log"
if "$LC" status --dir "$D" >/dev/null; then dt_fail "workers left running after a failed start"; fi

# --- --bind: worker I on CPU I when there are enough CPUs, else no binding and a note ---
ncpu=$(nproc)
if ((ncpu >= 2)) && command -v taskset >/dev/null; then
  D=$DT_TEST_TMP/lc-bind
  DT_BIN_DIR=$STUB "$LC" 2 --dir "$D" --bind --timeout 20 >"$DT_TEST_TMP/bind.out" 2>&1 ||
    { cat "$DT_TEST_TMP/bind.out"; dt_fail "local-cluster.sh 2 --bind failed"; }
  for i in 0 1; do
    cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "/proc/$(cat "$D/worker-$i.pid")/status")
    dt_assert_eq "$cpus" "$i" "worker $i's CPUs with --bind"
  done
  "$LC" stop --dir "$D" >/dev/null || dt_fail "stop (--bind) failed"
  D=$DT_TEST_TMP/lc-bind-many
  n=$((ncpu + 1))
  DT_BIN_DIR=$STUB "$LC" $n --dir "$D" --bind --timeout 20 >"$DT_TEST_TMP/bind2.out" 2>&1 ||
    { cat "$DT_TEST_TMP/bind2.out"; dt_fail "local-cluster.sh $n --bind failed"; }
  dt_assert_contains "$DT_TEST_TMP/bind2.out" "not binding" "--bind with more workers than CPUs says so"
  cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "/proc/$(cat "$D/worker-0.pid")/status")
  dt_assert_eq "$cpus" "$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)" "worker 0 unbound"
  "$LC" stop --dir "$D" >/dev/null || dt_fail "stop (--bind, many) failed"
fi

# --- bad usage ---
if "$LC" 0 >/dev/null 2>&1; then dt_fail "N=0 accepted"; fi
if DT_BIN_DIR=$STUB "$LC" 2 --dir "$DT_TEST_TMP/lc-d" --base-port 65535 >/dev/null 2>&1; then dt_fail "ports past 65535 accepted"; fi

# --- the real daemon, once it knows --ready-file ---
if "$DT_BIN_DIR/dtraind" --help 2>&1 | grep -q -- --ready-file; then
  D=$DT_TEST_TMP/lc-real
  "$LC" 2 --dir "$D" --timeout 40 >"$DT_TEST_TMP/real.out" 2>&1 || { cat "$DT_TEST_TMP/real.out"; dt_fail "real 2-worker cluster did not form"; }
  cat "$DT_TEST_TMP/real.out"
  addr=$(sed -n 's/^  worker 0 (chief): \([^ ]*\) .*/\1/p' "$DT_TEST_TMP/real.out")
  if "$DT_BIN_DIR/dtrain" --help 2>&1 | grep -q -- --token-file; then
    out=$("$DT_BIN_DIR/dtrain" --addr "$addr" --token-file "$D/token" cluster --json) || dt_fail "dtrain cluster failed"
    dt_assert_eq "$(dt_json_get tasks <<<"$out" | /usr/bin/python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" 2 "tasks in dtrain cluster --json"
  fi
  "$LC" stop --dir "$D" || dt_fail "stopping the real cluster failed"
else
  echo "bin/dtraind has no --ready-file yet: checked local-cluster.sh with the stub only"
fi
echo "local-cluster OK"
