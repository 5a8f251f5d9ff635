#!/usr/bin/env bash
# timeout: 90
# GPU jobs at submit, on daemons that have no GPU (CUDA_VISIBLE_DEVICES="" hides any the host
# has): `dtrain cluster` shows every task's GPU count (0) and model (""); a job asking for /gpu:0
# exits 2 naming the device, the task (worker:0 and its address) and its GPU count; a job mixing
# /gpu and /cpu replicas exits 2 naming both entries; neither is queued, and the daemons go on.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

export CUDA_VISIBLE_DEVICES=""
jobs_data
jobs_daemons 2 g

jc cluster --json >"$DT_TEST_TMP/cluster.json" || dt_fail "dtrain cluster --json"
for i in 0 1; do
  dt_assert_eq "$(dt_json_get "tasks.$i.gpus" "$DT_TEST_TMP/cluster.json")" 0 "task $i's gpus"
  dt_assert_eq "$(dt_json_get "tasks.$i.gpu_model" "$DT_TEST_TMP/cluster.json")" "" "task $i's gpu_model"
done
jc cluster >"$DT_TEST_TMP/cluster.txt" || dt_fail "dtrain cluster"
cat "$DT_TEST_TMP/cluster.txt"
dt_assert_contains "$DT_TEST_TMP/cluster.txt" 'CORES GPUS  GPU MODEL$' "the table's GPU columns"
dt_assert_contains "$DT_TEST_TMP/cluster.txt" '^worker:1 .* 0  -$' "worker 1's GPUs and model"

# /gpu:0 on tasks without GPUs: refused at submit, naming the device and the first such task.
jobs_spec "$DT_TEST_TMP/gpu.json" 1 32 ', "strategy": {"devices": ["/GPU:0"], "precision": "tf32"}'
rc=0
jc submit "$DT_TEST_TMP/gpu.json" >"$DT_TEST_TMP/gpu.out" 2>"$DT_TEST_TMP/gpu.err" || rc=$?
cat "$DT_TEST_TMP/gpu.err"
dt_assert_eq "$rc" 2 "dtrain submit of a /gpu:0 job on GPU-less daemons"
dt_assert_contains "$DT_TEST_TMP/gpu.err" \
  "\\\$\\.strategy\\.devices\\[0\\]: /gpu:0 is not on worker:0 \\(${JOBS_ADDRS[0]}\\), which has no GPU \\(and 1 more task\\)" \
  "the refusal names the device, the task, its address and its GPU count"

# Mixed CPU and GPU replicas: refused by the spec's validation, naming both entries.
jobs_spec "$DT_TEST_TMP/mixed.json" 1 32 ', "strategy": {"devices": ["/cpu:0", "/device:GPU:0"]}'
rc=0
jc submit "$DT_TEST_TMP/mixed.json" >/dev/null 2>"$DT_TEST_TMP/mixed.err" || rc=$?
cat "$DT_TEST_TMP/mixed.err"
dt_assert_eq "$rc" 2 "dtrain submit of a job mixing /cpu and /gpu replicas"
dt_assert_contains "$DT_TEST_TMP/mixed.err" \
  '\$\.strategy\.devices\[1\]: "/device:GPU:0" is a GPU but \$\.strategy\.devices\[0\] "/cpu:0" is a CPU: their rounding differs' \
  "the mixed refusal names both entries"

# Nothing was queued; the chief still answers and takes a CPU job.
jc jobs --json >"$DT_TEST_TMP/jobs.json" || dt_fail "dtrain jobs after the refusals"
dt_assert_eq "$(dt_json_get jobs "$DT_TEST_TMP/jobs.json")" "[]" "jobs queued by the refusals"
jobs_spec "$DT_TEST_TMP/cpu.json" 1 32 ', "strategy": {"devices": ["/cpu:0"], "precision": "tf32"}'
jc submit "$DT_TEST_TMP/cpu.json" --watch >"$DT_TEST_TMP/cpu.out" 2>&1 ||
  dt_fail "the CPU job (tf32 accepted and ignored on CPUs) did not succeed: $(tail -3 "$DT_TEST_TMP/cpu.out")"
dt_assert_eq "$(jobs_state 1)" succeeded "the CPU job's state"
dt_stop_daemon g-w1
dt_stop_daemon g-w0
