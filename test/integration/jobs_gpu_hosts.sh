#!/usr/bin/env bash
# timeout: 240
# GPU replicas on several hosts, end to end without a GPU: two daemons, each in a private mount
# namespace whose /dev lists two GPUs (nvidia0, nvidia1: what a daemon counts and reports), on
# the stand-in backend (build/libdtrain-fakegpu.so: the CPU kernels as 2 devices with their own
# memory, NCCL's place taken by a barrier). A job on ["/gpu:0", "/gpu:1"] is accepted at submit
# against the GPUs the daemons reported, and trains with the buckets reduce-scattered and
# all-gathered by the clique inside each daemon and one host ring per GPU index between them
# (lib/service/gpu_ring.c). Its weights are the same job's on ["/cpu:0", "/cpu:1"] bit for bit
# (2 x 2: every sum has two terms at each stage, so no order can differ); both daemons agree.
# kill -9 of one daemon mid-job releases the other's GPU replicas at once and the job resumes
# when it is back. Then the same job on the CUDA backend's own code, on the host emulator of 2
# GPUs a daemon.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

fake=$DT_SRC_DIR/build/libdtrain-fakegpu.so
[[ -f $fake ]] || dt_skip "no $fake (make builds it)"
jobs_gpu_ns 2

jobs_data
# small buckets: the Dense layers' 2,388 gradients go on the wire (through the clique and the
# host rings), the first layer's 40 ride with the step's metrics
small='"bucket_mb": 0.001, "first_bucket_mb": 0.0005'
jobs_spec "$DT_TEST_TMP/cpus.json" 2 32 ", \"strategy\": {\"devices\": [\"/cpu:0\", \"/cpu:1\"], $small}"
jobs_spec "$DT_TEST_TMP/gpus.json" 2 32 ", \"strategy\": {\"devices\": [\"/gpu:0\", \"/gpu:1\"], $small}"
jobs_spec "$DT_TEST_TMP/gpu3.json" 2 32 ', "strategy": {"devices": ["/gpu:0", "/gpu:2"]}'

jobs_gpu_daemons 2 g DTRAIN_CUDA_LIB="$fake" DTRAIN_FAKE_GPUS=2
jc cluster --json >"$DT_TEST_TMP/cluster.json" || dt_fail "dtrain cluster"
/usr/bin/python3 - "$DT_TEST_TMP/cluster.json" <<'PY' || dt_fail "the daemons' GPUs in dtrain cluster"
import json, sys
c = json.load(open(sys.argv[1]))
tasks = c.get("tasks") or c.get("cluster") or c
gpus = [t.get("gpus") for t in tasks] if isinstance(tasks, list) else None
print("dtrain cluster: gpus", gpus)
assert gpus and all((g if isinstance(g, int) else g.get("count")) == 2 for g in gpus), gpus
PY

# a device the hosts lack is refused at submit, naming it
rc=0
jc submit "$DT_TEST_TMP/gpu3.json" >/dev/null 2>"$DT_TEST_TMP/gpu3.err" || rc=$?
dt_assert_eq "$rc" 2 "a job on /gpu:2 of 2-GPU hosts"
dt_assert_contains "$DT_TEST_TMP/gpu3.err" "/gpu:2" "the refusal names the device"

jc submit "$DT_TEST_TMP/gpus.json" --watch --json >"$DT_TEST_TMP/gpus.jsonl" ||
  dt_fail "the 2 x 2 GPU job did not succeed: $(tail -1 "$DT_TEST_TMP/gpus.jsonl")"
jc status 1 --json >"$DT_TEST_TMP/gpus.status"
dt_assert_eq "$(dt_json_get examples "$DT_TEST_TMP/gpus.status")" 512 "examples over 4 GPU replicas"
g0=$(dt_json_get weights_hashes.0 "$DT_TEST_TMP/gpus.status")
[[ -n $g0 ]] || dt_fail "the GPU job reported no weights hash"
dt_assert_eq "$(dt_json_get weights_hashes.1 "$DT_TEST_TMP/gpus.status")" "$g0" "the two daemons' hashes"
for i in 0 1; do
  dt_assert_contains "$DT_TEST_TMP/g-w$i.log" \
    "rank $i trains 2 GPU replicas .* NCCL among them and one host ring a GPU across hosts" \
    "worker:$i's GPU replicas"
done
dt_assert_contains "$DT_TEST_TMP/g-w0.log" "2 fusion buckets over 2428 gradients" "the bucket plan"

jc submit "$DT_TEST_TMP/cpus.json" --watch --json >"$DT_TEST_TMP/cpus.jsonl" ||
  dt_fail "the 2 x 2 CPU job did not succeed: $(tail -1 "$DT_TEST_TMP/cpus.jsonl")"
c0=$(jc status 2 --json | dt_json_get weights_hashes.0)
echo "2 daemons x 2 replicas: GPUs (stand-in) $g0, CPUs $c0"
dt_assert_eq "$g0" "$c0" "the GPU job's weights against the CPU job's"

# kill -9 of worker:1 mid-job: worker:0's GPU replicas, in the clique or on the host ring, are
# released at once (the ring's break aborts the hierarchical comm, which aborts the clique), the
# job goes to `restarting` naming worker:1, and resumes from a checkpoint once it is back.
jobs_spec "$DT_TEST_TMP/long.json" 400 96 ", \"strategy\": {\"devices\": [\"/gpu:0\", \"/gpu:1\"], $small}, \"checkpoint\": {\"save_freq\": 40, \"keep\": 2}, \"fault_tolerance\": {\"max_restarts\": 2, \"rejoin_timeout_s\": 60}"
jc submit "$DT_TEST_TMP/long.json" >/dev/null
jobs_wait_state 3 running 20
jobs_wait_step_past 3 100
kill -KILL "$(dt_daemon_pid g-w1)"
t_kill=$(dt__now_ms)
jobs_wait_state 3 restarting 5
dt_wait_for grep -q "job 3: rank 0 ended" "$DT_TEST_TMP/g-w0.log" --timeout 5 ||
  dt_fail "worker:0's GPU replicas did not stop within 5 s of worker:1's death"
echo "kill -9 of worker:1: restarting, worker:0's GPU replicas stopped, after $(ms_since "$t_kill") ms"
dt_assert_contains "$(jc status 3 --json | dt_json_get error)" "worker:1" "the restart names the dead task"
wait "$(dt_daemon_pid g-w1)" 2>/dev/null || true
jobs_gpu_start_one g 1 DTRAIN_CUDA_LIB="$fake" DTRAIN_FAKE_GPUS=2
jobs_wait_state 3 running 30
dt_wait_for grep -q "resuming from .*jobs/3/checkpoints/ckpt-" "$DT_TEST_TMP/g-w0.log" --timeout 10 ||
  dt_fail "job 3 did not resume from a checkpoint"
jobs_wait_state 3 succeeded 120
echo "the GPU job resumed after worker:1 came back and succeeded ($(ms_since "$t_kill") ms after the kill)"
dt_stop_daemon g-w1
dt_stop_daemon g-w0

# The CUDA backend's own code (nccl.cu's clique, the kernels) on the host emulator of 2 GPUs:
# the same job follows the CPU job epoch by epoch (other kernels, so other last bits).
emu=$DT_SRC_DIR/build/libdtrain-cudaemu.so
if [[ ! -f $emu ]]; then
  echo "no $emu (the build makes it where python3 and g++ exist): the emulated run is left out"
  exit 0
fi
jobs_gpu_daemons 2 e DTRAIN_CUDA_LIB="$emu" DTRAIN_EMU_GPUS=2
jc submit "$DT_TEST_TMP/gpus.json" --watch --json >"$DT_TEST_TMP/emu.jsonl" ||
  dt_fail "the 2 x 2 emulated GPU job did not succeed: $(tail -1 "$DT_TEST_TMP/emu.jsonl")"
jc status 1 --json >"$DT_TEST_TMP/emu.status"
e0=$(dt_json_get weights_hashes.0 "$DT_TEST_TMP/emu.status")
dt_assert_eq "$(dt_json_get weights_hashes.1 "$DT_TEST_TMP/emu.status")" "$e0" \
  "the two daemons' hashes (emulated GPUs)"
jobs_follows "$DT_TEST_TMP/emu.jsonl" "$DT_TEST_TMP/cpus.jsonl" "2 x 2 emulated GPUs against 2 x 2 CPUs"
dt_stop_daemon e-w1
dt_stop_daemon e-w0
