#!/usr/bin/env bash
# timeout: 90
# What a daemon refuses, and how it says so: bad TF_CONFIG (exit 2 naming the key), a ps task,
# --check --json, a port in use, a wrong or missing token, a cluster that differs from the
# chief's (both sides name the entries), a non-loopback address without a token, and a
# rendezvous that times out naming the missing task.
source "$(dirname "$0")/lib.sh"
D=$DT_BIN_DIR/dtraind C=$DT_BIN_DIR/dtrain T=$DT_TEST_TMP

# expect_exit CODE OUTFILE CMD...: run CMD, check its exit status, keep stdout+stderr in OUTFILE.
expect_exit() {
  local want=$1 out=$2 rc
  shift 2
  "$@" >"$out" 2>&1 && rc=0 || rc=$?
  [[ $rc == "$want" ]] || { cat "$out"; dt_fail "'$*' exited $rc, expected $want"; }
}

# --- configuration errors: exit 2 with the key --------------------------------------------------
expect_exit 2 "$T/bad-index" env TF_CONFIG='{"cluster":{"worker":["127.0.0.1:7000"]},"task":{"type":"worker","index":3}}' "$D" --check
dt_assert_contains "$T/bad-index" 'task.index' "bad index message"
expect_exit 2 "$T/bad-json" env TF_CONFIG='{"cluster":{"worker":["127.0.0.1:7000"' "$D"
dt_assert_contains "$T/bad-json" 'tfconfig' "truncated JSON message"
expect_exit 2 "$T/bad-port" env TF_CONFIG='{"cluster":{"worker":["127.0.0.1:70000"]},"task":{"type":"worker","index":0}}' "$D"
dt_assert_contains "$T/bad-port" 'worker\[0\]' "bad port message"
expect_exit 2 "$T/no-task" env TF_CONFIG='{"cluster":{"worker":["127.0.0.1:7000"]}}' "$D"
dt_assert_contains "$T/no-task" 'has no "task"' "missing task message"
expect_exit 2 "$T/ps" env TF_CONFIG='{"cluster":{"worker":["127.0.0.1:7000"],"ps":["127.0.0.1:7001"]},"task":{"type":"ps","index":0}}' "$D" --check
dt_assert_contains "$T/ps" 'no parameter servers' "ps message"
expect_exit 2 "$T/ps-run" env TF_CONFIG='{"cluster":{"worker":["127.0.0.1:7000"],"ps":["127.0.0.1:7001"]},"task":{"type":"ps","index":0}}' "$D"
expect_exit 2 "$T/badflag" "$D" --no-such-flag
expect_exit 2 "$T/badrdv" "$D" --rendezvous-timeout -3
dt_assert_contains "$T/badrdv" 'rendezvous-timeout' "bad flag message"

# --- --check --json: DESIGN.md's keys ------------------------------------------------------------
expect_exit 0 "$T/check.json" env TF_CONFIG="$(dt_tfconfig_json worker 1 chief=127.0.0.1:7000 worker=127.0.0.1:7001,127.0.0.1:7002)" "$D" --check --json
dt_assert_eq "$(dt_json_get task_type "$T/check.json")" worker "check task_type"
dt_assert_eq "$(dt_json_get task_index "$T/check.json")" 1 "check task_index"
dt_assert_eq "$(dt_json_get rank "$T/check.json")" 2 "check rank"
dt_assert_eq "$(dt_json_get world_size "$T/check.json")" 3 "check world_size"
dt_assert_eq "$(dt_json_get chief "$T/check.json")" "chief:0" "check chief"
dt_assert_eq "$(dt_json_get is_chief "$T/check.json")" false "check is_chief"
dt_assert_eq "$(dt_json_get address "$T/check.json")" 127.0.0.1:7002 "check address"
expect_exit 0 "$T/check-eval.json" env TF_CONFIG='{"cluster":{"worker":["127.0.0.1:7000"]},"task":{"type":"evaluator","index":0}}' "$D" --check --json
dt_assert_eq "$(dt_json_get rank "$T/check-eval.json")" null "evaluator rank"
"$D" --help | grep -q -- --tf-config || dt_fail "--help does not list --tf-config"
"$D" --version | grep -q '^dtraind ' || dt_fail "--version"

# --- a port in use ------------------------------------------------------------------------------
mapfile -t ports < <(dt_free_ports 4)
a0=127.0.0.1:${ports[0]} a1=127.0.0.1:${ports[1]}
head -c 24 /dev/urandom | base64 >"$T/tokA"
head -c 24 /dev/urandom | base64 >"$T/tokB"
chmod 600 "$T/tokA" "$T/tokB"
dt_start_daemon single -- --listen "$a0" --token-file "$T/tokA" --ready-file "$T/single.ready"
dt_wait_file "$T/single.ready" --timeout 10 || dt_fail "single daemon never ready"
expect_exit 1 "$T/inuse" "$D" --listen "$a0"
dt_assert_contains "$T/inuse" "cannot listen on $a0" "port in use message"

# --- tokens: none, wrong, right ----------------------------------------------------------------
expect_exit 2 "$T/notoken" "$C" cluster --addr "$a0"
dt_assert_contains "$T/notoken" 'token' "missing token message"
expect_exit 2 "$T/wrongtoken" "$C" cluster --addr "$a0" --token-file "$T/tokB"
dt_assert_contains "$T/wrongtoken" 'token' "wrong token message"
expect_exit 0 "$T/goodtoken" "$C" cluster --addr "$a0" --token-file "$T/tokA" --json
dt_assert_eq "$(dt_json_get tasks.0.state "$T/goodtoken")" joined "single daemon state"
dt_assert_contains "$T/single.log" 'refused .* missing or wrong cluster token' "server-side token log"
dt_stop_daemon single 5

# A worker with the wrong token is refused at join and exits 2.
dt_start_daemon tchief TF_CONFIG="$(dt_tfconfig_workers 0 "$a0" "$a1")" -- --token-file "$T/tokA"
expect_exit 2 "$T/tworker" env TF_CONFIG="$(dt_tfconfig_workers 1 "$a0" "$a1")" timeout 20 "$D" --token-file "$T/tokB"
dt_assert_contains "$T/tworker" 'token' "worker refused for its token"
dt_stop_daemon tchief 5

# --- a cluster that differs from the chief's -----------------------------------------------------
a2=127.0.0.1:${ports[2]} a3=127.0.0.1:${ports[3]}
dt_start_daemon mchief TF_CONFIG="$(dt_tfconfig_workers 0 "$a0" "$a1")" -- --rendezvous-timeout 20
expect_exit 2 "$T/mworker" env TF_CONFIG="$(dt_tfconfig_workers 1 "$a0" "$a1" "$a3")" timeout 20 "$D"
dt_assert_contains "$T/mworker" 'cluster mismatch' "worker's mismatch message"
dt_assert_contains "$T/mworker" "worker:2 .$a3. only here" "worker names the extra entry"
dt_wait_for grep -q "refused worker:1" "$T/mchief.log" --timeout 3 || dt_fail "chief did not log the refusal"
dt_assert_contains "$T/mchief.log" "worker:2 .$a3. only there" "chief names the entry it lacks"
dt_stop_daemon mchief 5

# --- non-loopback without a token ---------------------------------------------------------------
expect_exit 2 "$T/open" env TF_CONFIG='{"cluster":{"worker":["10.255.1.1:7000"]},"task":{"type":"worker","index":0}}' "$D"
dt_assert_contains "$T/open" 'without a token' "non-loopback refusal"

# --- rendezvous deadline: the chief says whom it waits for, then exits 1 naming them ------------
expect_exit 1 "$T/rdv" env TF_CONFIG="$(dt_tfconfig_workers 0 "$a2" "$a3")" timeout 30 "$D" --rendezvous-timeout 4
dt_assert_contains "$T/rdv" "waiting .* worker:1 .$a3." "progress while waiting"
dt_assert_contains "$T/rdv" "rendezvous timed out after 4 s; never joined: worker:1 .$a3." "timeout message"
# --- ps entries are accepted, left out of the ring, with a warning --------------------------------
mapfile -t pp < <(dt_free_ports 2)
dt_start_daemon withps TF_CONFIG="$(dt_tfconfig_json worker 0 "worker=127.0.0.1:${pp[0]}" "ps=127.0.0.1:${pp[1]}")" -- --ready-file "$T/withps.ready"
dt_wait_file "$T/withps.ready" --timeout 10 || dt_fail "a cluster with a ps entry never formed"
dt_assert_contains "$T/withps.log" "1 ps task: dtrain has no parameter servers" "ps warning"
dt_assert_eq "$(dt_json_get world_size "$T/withps.ready")" 1 "ps left out of the world size"
echo PASS
