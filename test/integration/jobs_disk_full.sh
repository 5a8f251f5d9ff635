#!/usr/bin/env bash
# timeout: 180
# The chief's disk fills up mid-job (its checkpoint dir on a 64 KiB tmpfs, in a mount namespace
# of its own). The checkpoint write fails naming the file and "No space left on device", leaving
# no temporary file behind; the job restarts ($.fault_tolerance.max_restarts 1), fails again the
# same way and ends failed, naming the chief, the file and the cause; both daemons stay healthy.
# Once there is room, `dtrain resume` finishes the job from its last checkpoint.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

dt_require_root
unshare -m --propagation private true 2>/dev/null || dt_skip "no mount namespaces here (unshare -m)"

jobs_data
mapfile -t ports < <(dt_free_ports 2)
JOBS_ADDRS=("127.0.0.1:${ports[0]}" "127.0.0.1:${ports[1]}")
JOBS_ADDR=${JOBS_ADDRS[0]}
STATE0=$DT_TEST_TMP/df-w0
CKPT=$STATE0/small
mkdir -p "$CKPT" "$DT_TEST_TMP/df-w1"
# The chief sees a 64 KiB tmpfs at $CKPT (room for one checkpoint of the tiny model, not for the
# next one beside it); nobody else does, and it goes away with the chief's namespace.
dt_bg df-w0 unshare -m --propagation private sh -c \
  'mount -t tmpfs -o size=64k tmpfs "$0" && exec "$@"' "$CKPT" \
  env TF_CONFIG="$(dt_tfconfig_workers 0 "${JOBS_ADDRS[@]}")" "$DT_BIN_DIR/dtraind" \
  --ready-file "$DT_TEST_TMP/df-w0.ready" --state-dir "$STATE0" --data-root "$JOBS_DATA" \
  --rendezvous-timeout 30
chief_pid=$DT_LAST_PID
jobs_start_one df 1
for i in 0 1; do dt_wait_file "$DT_TEST_TMP/df-w$i.ready" --timeout 30 || dt_fail "worker:$i did not start"; done
in_chief_ns() { nsenter -t "$chief_pid" -m "$@"; }
in_chief_ns df -k "$CKPT" | grep -q tmpfs || dt_fail "the chief's checkpoint dir is not the small tmpfs"

jobs_spec "$DT_TEST_TMP/df.json" 60 32 \
  ', "checkpoint": {"dir": "small", "save_freq": 50, "keep": 3}, "fault_tolerance": {"max_restarts": 1, "rejoin_timeout_s": 30}'
jc submit "$DT_TEST_TMP/df.json" >/dev/null
jobs_wait_state 1 failed 60
jc status 1 --json >"$DT_TEST_TMP/s1.json" || true # a failed job's status exits 1
err=$(dt_json_get error "$DT_TEST_TMP/s1.json")
echo "error: $err"
# Whichever rank's report comes first names the chief and its error (the other learns it from
# the chief's abort notice, not from a closed link).
dt_assert_contains "$err" "worker:0.*checkpoint: /[^ ]*/small/ckpt-[0-9]+\.safetensors" \
  "the error names the chief and the checkpoint file"
dt_assert_contains "$err" "No space left on device" "the error says the disk is full"
dt_assert_eq "$(dt_json_get restarts "$DT_TEST_TMP/s1.json")" 1 "restarts before it failed"
leftover=$(in_chief_ns sh -c "ls '$CKPT' | grep -c tmp" || true)
dt_assert_eq "$leftover" 0 "temporary checkpoint files left on the full disk"
saved=$(in_chief_ns sh -c "ls '$CKPT'" | tr '\n' ' ')
echo "on the full disk: $saved"
[[ $saved == *ckpt-50.safetensors* ]] || dt_fail "the checkpoints written before the disk filled are gone: $saved"
# Both daemons are alive and healthy: the cluster and a one-line status answer.
jc cluster --json >"$DT_TEST_TMP/cluster.json"
for r in 0 1; do
  dt_assert_eq "$(dt_json_get tasks.$r.state "$DT_TEST_TMP/cluster.json")" joined "task $r after the full disk"
  dt_assert_eq "$(dt_json_get tasks.$r.unhealthy "$DT_TEST_TMP/cluster.json")" null "task $r's health"
done

# Room again: resume finishes the job from the latest checkpoint.
in_chief_ns mount -o remount,size=16m "$CKPT"
jc resume 1 >/dev/null || dt_fail "resume of job 1"
jobs_wait_state 1 succeeded 60
dt_assert_contains "$DT_TEST_TMP/df-w0.log" "resuming from .*small/ckpt-" "the resumed run starts from a checkpoint"
h0=$(jc status 1 --json | dt_json_get weights_hashes.0)
h1=$(jc status 1 --json | dt_json_get weights_hashes.1)
dt_assert_eq "$h1" "$h0" "the replicas' weights after the resume"
echo "ok: a full disk fails the job naming the chief, the file and the cause; resume finishes it"
