#!/usr/bin/env bash
# timeout: 60
# One daemon: submit a tiny job -> succeeded; watch (JSON lines and the Keras bar on a pty),
# status --json keys, jobs, export (a safetensors file with Keras names, no optimizer state),
# evaluate and predict.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

jobs_data
jobs_spec "$DT_TEST_TMP/tiny.json" 2 32
jobs_daemons 1 one

out=$(jc submit "$DT_TEST_TMP/tiny.json")
dt_assert_contains "$out" "^job 1 \(tiny\) submitted" "submit output"
jc watch 1 --json >"$DT_TEST_TMP/watch.jsonl" || dt_fail "watch exited $? for a job that should succeed"

# Every line is one JSON event with a growing seq; the last one says succeeded.
/usr/bin/python3 - "$DT_TEST_TMP/watch.jsonl" <<'PY' || dt_fail "watch --json lines are wrong"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
seqs = [e["seq"] for e in lines]
assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs
kinds = [e["kind"] for e in lines]
for k in ("state", "epoch_begin", "step", "epoch_end"):
    assert k in kinds, (k, kinds)
ends = [e for e in lines if e["kind"] == "epoch_end"]
assert [e["epoch"] for e in ends] == [1, 2], ends
assert all(e["step"] == e["steps"] == 16 for e in ends), ends
assert "loss" in ends[-1]["metrics"] and "val_accuracy" in ends[-1]["metrics"], ends[-1]
assert lines[-1]["kind"] == "state" and lines[-1]["state"] == "succeeded", lines[-1]
states = [e["state"] for e in lines if e["kind"] == "state"]
assert states == ["queued", "preparing", "running", "succeeded"], states
PY

# status --json: DESIGN's keys.
jc status 1 --json >"$DT_TEST_TMP/status.json"
for k in id name state epoch step metrics error; do
  dt_json_get "$k" "$DT_TEST_TMP/status.json" >/dev/null || dt_fail "status --json has no key $k"
done
dt_assert_eq "$(dt_json_get state "$DT_TEST_TMP/status.json")" succeeded "state"
dt_assert_eq "$(dt_json_get name "$DT_TEST_TMP/status.json")" tiny "name"
dt_assert_eq "$(dt_json_get epoch "$DT_TEST_TMP/status.json")" 2 "epoch"
dt_assert_eq "$(dt_json_get global_step "$DT_TEST_TMP/status.json")" 32 "global step"
dt_assert_eq "$(dt_json_get error "$DT_TEST_TMP/status.json")" null "error"
acc=$(dt_json_get metrics.accuracy "$DT_TEST_TMP/status.json")
/usr/bin/python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) > 0.5 else 1)" "$acc" ||
  dt_fail "the tiny job did not learn: accuracy $acc"
# status without a job: the latest one; by name too.
dt_assert_eq "$(jc status --json | dt_json_get id)" 1 "status without JOB"
dt_assert_eq "$(jc status tiny --json | dt_json_get id)" 1 "status by name"
dt_assert_contains "$(jc jobs)" "^1 +tiny +succeeded +2/2 +16/16" "jobs table"
dt_assert_eq "$(jc jobs --json | dt_json_get jobs.0.state)" succeeded "jobs --json"

# export: safetensors with the Keras names of the model's weights and nothing else.
jc export 1 -o "$DT_TEST_TMP/w.safetensors" >/dev/null
/usr/bin/python3 - "$DT_TEST_TMP/w.safetensors" <<'PY' || dt_fail "exported file is not the model's safetensors"
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h.pop("__metadata__", None)
names = sorted(h)
assert names == ["conv/bias", "conv/kernel", "hidden/bias", "hidden/kernel", "out/bias", "out/kernel"], names
assert h["conv/kernel"]["shape"] == [3, 3, 1, 4], h["conv/kernel"]
assert h["hidden/kernel"]["shape"] == [144, 16], h["hidden/kernel"]
assert all(v["dtype"] == "F32" for v in h.values())
end = max(v["data_offsets"][1] for v in h.values())
assert 8 + n + end == len(b), (8 + n + end, len(b))
PY

# evaluate on the validation split (a whole job spec gives its validation split).
jc evaluate 1 --data "$DT_TEST_TMP/tiny.json" --json >"$DT_TEST_TMP/eval.json"
dt_assert_eq "$(dt_json_get examples "$DT_TEST_TMP/eval.json")" 128 "evaluated examples"
dt_json_get accuracy "$DT_TEST_TMP/eval.json" >/dev/null || dt_fail "evaluate --json has no accuracy"
# predict: CSV, one line per example, 4 outputs; inline data spec; options before positionals.
jc predict --data '{"format": "idx", "images": "val-images-idx3-ubyte", "labels": "val-labels-idx1-ubyte", "scale": 0.00392156862745098, "image_shape": [8, 8, 1]}' \
  -o "$DT_TEST_TMP/p.csv" 1 >/dev/null
dt_assert_eq "$(wc -l <"$DT_TEST_TMP/p.csv")" 128 "predicted rows"
dt_assert_eq "$(head -1 "$DT_TEST_TMP/p.csv" | tr ',' '\n' | wc -l)" 4 "predicted columns"

# The Keras progress bar on a terminal (script gives watch a pty).
if command -v script >/dev/null; then
  script -qec "$DT_BIN_DIR/dtrain --addr $JOBS_ADDR watch 1" /dev/null >"$DT_TEST_TMP/bar.txt" </dev/null || true
  dt_assert_contains "$DT_TEST_TMP/bar.txt" "Epoch 1/2" "progress bar epoch line"
  dt_assert_contains "$DT_TEST_TMP/bar.txt" "16/16 \[==============================\] - [0-9]+s [0-9]+ms/step - loss: [0-9.]+ - accuracy: [0-9.]+ - val_loss" "progress bar line"
fi
echo "ok: submit, watch, status, jobs, export, evaluate, predict"
