#!/usr/bin/env bash
# timeout: 120
# `dtrain bench train --workers R` on a formed two-task cluster: it trains through the job
# service and reports world_size 2 and a positive samples/s; --workers 3 on two tasks exits 2
# before submitting anything; a run longer than an epoch spans epochs; --compression bf16 trains
# on the bfloat16 wire; a spec the chief refuses exits non-zero.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

jobs_data
jobs_spec "$DT_TEST_TMP/tiny.json" 1 32
/usr/bin/python3 -c 'import json, sys; json.dump(json.load(open(sys.argv[1]))["model"], open(sys.argv[2], "w"))' \
  "$DT_TEST_TMP/tiny.json" "$DT_TEST_TMP/model.json"
jobs_daemons 2 bench

# --data takes the tiny spec's $.data.train (512 examples: 10 warm-up + 5 steps of 32 fit).
jc bench train --workers 2 --model "$DT_TEST_TMP/model.json" --data "$DT_TEST_TMP/tiny.json" \
  --batch 32 --steps 5 --json >"$DT_TEST_TMP/bench.json" 2>"$DT_TEST_TMP/bench.err" ||
  dt_fail "bench train --workers 2 failed: $(cat "$DT_TEST_TMP/bench.err")"
cat "$DT_TEST_TMP/bench.json"
dt_assert_eq "$(dt_json_get world_size "$DT_TEST_TMP/bench.json")" 2 "world_size"
dt_assert_eq "$(dt_json_get batch "$DT_TEST_TMP/bench.json")" 32 "batch"
sps=$(dt_json_get samples_per_s "$DT_TEST_TMP/bench.json")
awk -v s="$sps" 'BEGIN { exit !(s > 0) }' || dt_fail "samples_per_s is '$sps', not > 0"
# Step events come at most ten a second: a run this short may end before one falls past the
# warm-up; then the warm-up is timed too, which the command must say.
first=$(dt_json_get first_timed_step "$DT_TEST_TMP/bench.json")
steps=$(dt_json_get timed_steps "$DT_TEST_TMP/bench.json")
dt_assert_eq "$((first + steps - 1))" 15 "the last timed step"
if ((first <= 10)); then
  dt_assert_contains "$(cat "$DT_TEST_TMP/bench.err")" "too short to leave the warm-up out" \
    "the warning that the warm-up was timed"
fi
dt_assert_eq "$(jc status "$(dt_json_get job "$DT_TEST_TMP/bench.json")" --json | dt_json_get state)" \
  succeeded "the benchmark's job"

# --compression bf16 with a small first bucket: the job's gradient buckets go over the ring on
# the bfloat16 wire (each worker logs its plan), and it still trains to the end.
jc bench train --workers 2 --model "$DT_TEST_TMP/model.json" --data "$DT_TEST_TMP/tiny.json" \
  --batch 32 --steps 5 --compression bf16 --first-bucket-mb 0.0001 --json \
  >"$DT_TEST_TMP/bf16.json" 2>"$DT_TEST_TMP/bf16.err" ||
  dt_fail "bench train --compression bf16 failed: $(cat "$DT_TEST_TMP/bf16.err")"
dt_assert_eq "$(dt_json_get compression "$DT_TEST_TMP/bf16.json")" bfloat16 "compression"
for i in 0 1; do
  dt_assert_contains "$(cat "$DT_TEST_TMP/bench-w$i.log")" \
    "2 fusion buckets over 2428 gradients .* wire bfloat16" "worker:$i's bucket plan"
done
# --devices 2: 2 CPU replicas a daemon ($.strategy.devices), 4 replicas over the two tasks.
jc bench train --workers 2 --devices 2 --model "$DT_TEST_TMP/model.json" --data "$DT_TEST_TMP/tiny.json" \
  --batch 32 --steps 5 --json >"$DT_TEST_TMP/dev.json" 2>"$DT_TEST_TMP/dev.err" ||
  dt_fail "bench train --devices 2 failed: $(cat "$DT_TEST_TMP/dev.err")"
dt_assert_eq "$(dt_json_get replicas "$DT_TEST_TMP/dev.json")" 4 "replicas with --devices 2"
dt_assert_eq "$(dt_json_get devices "$DT_TEST_TMP/dev.json")" 2 "devices"
sps=$(dt_json_get samples_per_s "$DT_TEST_TMP/dev.json")
awk -v s="$sps" 'BEGIN { exit !(s > 0) }' || dt_fail "samples_per_s with --devices 2 is '$sps'"
dt_assert_contains "$(cat "$DT_TEST_TMP/bench-w1.log")" "rank 1 trains 2 CPU replicas .global ranks 2\\.\\.3 of 4" \
  "worker:1 ran 2 replicas"
rc=0
"$DT_BIN_DIR/dtrain" bench train --devices 0 --workers 2 --model "$DT_TEST_TMP/model.json" >/dev/null 2>"$DT_TEST_TMP/nodev.err" || rc=$?
dt_assert_eq "$rc" 2 "exit status of --devices 0"
dt_assert_contains "$(cat "$DT_TEST_TMP/nodev.err")" "--devices 0: give 1..64" "the --devices message"
rc=0
jc bench train --workers 2 --model "$DT_TEST_TMP/model.json" --compression fp8 \
  >/dev/null 2>"$DT_TEST_TMP/fp8.err" || rc=$?
dt_assert_eq "$rc" 2 "exit status of --compression fp8"
dt_assert_contains "$(cat "$DT_TEST_TMP/fp8.err")" "--compression fp8: give none, bf16 or f16" "the message"

# The wrong world size: exit 2 with a message naming both counts, and no job submitted.
rc=0
jc bench train --workers 3 --model "$DT_TEST_TMP/model.json" --data "$DT_TEST_TMP/tiny.json" \
  --steps 5 --json >/dev/null 2>"$DT_TEST_TMP/three.err" || rc=$?
dt_assert_eq "$rc" 2 "exit status of --workers 3 on 2 tasks"
dt_assert_contains "$(cat "$DT_TEST_TMP/three.err")" "--workers 3, but .* has 2 tasks" "the message"
dt_assert_eq "$(jc jobs --json | /usr/bin/python3 -c 'import json,sys; print(len(json.load(sys.stdin)["jobs"]))')" \
  3 "jobs after the refused run"

# A job the chief refuses (its data is not there) is not a result.
rc=0
jc bench train --workers 2 --model "$DT_TEST_TMP/model.json" --steps 5 --json \
  --data '{"format": "idx", "images": "none-images", "labels": "none-labels"}' \
  >"$DT_TEST_TMP/bad.json" 2>"$DT_TEST_TMP/bad.err" || rc=$?
((rc != 0)) || dt_fail "a refused job exited 0: $(cat "$DT_TEST_TMP/bad.json")"
[[ ! -s $DT_TEST_TMP/bad.json ]] || dt_fail "a refused job printed a result"

# Fashion-MNIST at global batch 20000 holds 3 steps an epoch: 2 warm-up + 7 timed steps run as
# 3 epochs of 3, timed across the epoch boundaries. Daemons of their own, whose data root holds
# /usr/share/datasets.
for i in 0 1; do dt_stop_daemon "bench-w$i"; done
jobs_daemons 2 epochs --data-root /
echo '{"class_name": "Sequential", "config": {"name": "mlp", "layers": [
  {"class_name": "InputLayer", "config": {"batch_input_shape": [null, 28, 28, 1], "name": "in"}},
  {"class_name": "Flatten", "config": {"name": "flat"}},
  {"class_name": "Dense", "config": {"name": "out", "units": 10}}]}}' >"$DT_TEST_TMP/mlp.json"
jc bench train --workers 2 --model "$DT_TEST_TMP/mlp.json" --batch 20000 --warmup 2 --steps 7 \
  --json >"$DT_TEST_TMP/epochs.json" 2>"$DT_TEST_TMP/epochs.err" ||
  dt_fail "bench train over several epochs failed: $(cat "$DT_TEST_TMP/epochs.err")"
cat "$DT_TEST_TMP/epochs.json"
dt_assert_eq "$(dt_json_get job_steps "$DT_TEST_TMP/epochs.json")" 9 "the run's steps"
first=$(dt_json_get first_timed_step "$DT_TEST_TMP/epochs.json")
steps=$(dt_json_get timed_steps "$DT_TEST_TMP/epochs.json")
dt_assert_eq "$((first + steps - 1))" 9 "the last timed step (epoch 3's last)"
sps=$(dt_json_get samples_per_s "$DT_TEST_TMP/epochs.json")
awk -v s="$sps" 'BEGIN { exit !(s > 0) }' || dt_fail "samples_per_s is '$sps', not > 0"
dt_assert_eq "$(jc status "$(dt_json_get job "$DT_TEST_TMP/epochs.json")" --json | dt_json_get epochs)" \
  3 "the job's epochs"

echo "ok: bench train --workers"
