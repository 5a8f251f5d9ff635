#!/usr/bin/env bash
# timeout: 90
# Compiled metrics through two daemons: a job listing Keras metrics (strings and Keras 3
# objects) reports them under Keras's names - val_ for validation - in watch's events and bar,
# status, the job's history (events.jsonl), evaluate and the chief's TensorBoard files (epoch_<name>, batch_<name>); a metric
# dtrain does not compute is refused at submit naming it.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

jobs_data
jobs_spec "$DT_TEST_TMP/m.json" 2 32 ', "tensorboard": {"log_dir": "tb-metrics"}'
/usr/bin/python3 - "$DT_TEST_TMP/m.json" <<'PY'
import json, sys
p = sys.argv[1]
s = json.load(open(p))
s["compile"]["metrics"] = [
    "accuracy",
    {"module": "keras.metrics", "class_name": "SparseTopKCategoricalAccuracy",
     "config": {"name": "top2", "dtype": "float32", "k": 2}, "registered_name": None},
    {"class_name": "MeanIoU", "config": {"name": "mean_io_u", "num_classes": 4,
                                         "ignore_class": None, "sparse_y_true": True,
                                         "sparse_y_pred": False, "axis": -1}},
    {"class_name": "AUC", "config": {"from_logits": True}},
]
json.dump(s, open(p, "w"))
PY
jobs_daemons 2 metrics

jc submit "$DT_TEST_TMP/m.json" >/dev/null
jc watch 1 --json >"$DT_TEST_TMP/watch.jsonl" || dt_fail "watch exited $? for a job that should succeed"
/usr/bin/python3 - "$DT_TEST_TMP/watch.jsonl" <<'PY' || dt_fail "watch --json: the metrics are wrong"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
ends = [e for e in lines if e["kind"] == "epoch_end"]
assert ends, lines
m = ends[-1]["metrics"]
want = ["loss", "accuracy", "top2", "mean_io_u", "auc",
        "val_loss", "val_accuracy", "val_top2", "val_mean_io_u", "val_auc"]
assert [k for k in m if k in want] == want, list(m)  # Keras's order
assert all(0 <= m[k] <= 1 for k in want if k not in ("loss", "val_loss")), m
assert m["top2"] >= m["accuracy"] and m["val_top2"] >= m["val_accuracy"], m
steps = [e for e in lines if e["kind"] == "step"]
assert all("top2" in e["metrics"] and "auc" in e["metrics"] for e in steps), steps[-1]
PY

jc status 1 --json >"$DT_TEST_TMP/status.json"
for k in top2 val_top2 mean_io_u val_mean_io_u auc val_auc; do
  dt_json_get "metrics.$k" "$DT_TEST_TMP/status.json" >/dev/null || dt_fail "status --json has no metric $k"
done

# The job's history on the chief (events.jsonl, one line per epoch end): every epoch's metrics.
/usr/bin/python3 - "$DT_TEST_TMP/metrics-w0/jobs/1/events.jsonl" <<'PY' || dt_fail "events.jsonl lacks the metrics"
import json, sys
ends = [e for e in map(json.loads, open(sys.argv[1])) if e["kind"] == "epoch_end"]
assert ends and ends[0]["epoch"] == 1, ends
assert all("val_top2" in e["metrics"] and "mean_io_u" in e["metrics"] for e in ends), ends
PY

# The bar (a line per epoch off a terminal) shows them in Keras's order.
jc watch 1 >"$DT_TEST_TMP/bar.txt" || true
dt_assert_contains "$DT_TEST_TMP/bar.txt" \
  "loss: [0-9.]+ - accuracy: [0-9.]+ - top2: [0-9.]+ - mean_io_u: [0-9.]+ - auc: [0-9.]+ - val_loss: [0-9.]+ - val_accuracy: [0-9.]+ - val_top2" \
  "watch line with the compiled metrics"

jc evaluate 1 --data "$DT_TEST_TMP/m.json" --json >"$DT_TEST_TMP/eval.json"
for k in top2 mean_io_u auc; do
  dt_json_get "$k" "$DT_TEST_TMP/eval.json" >/dev/null || dt_fail "evaluate --json has no $k"
done

# TensorBoard on the chief: Keras's runs (the job's own folder, train and validation) and tags.
tb=$(find "$DT_TEST_TMP/metrics-w0" -path '*tb-metrics/*-1/train/*' -name 'events.out.tfevents.*' | head -1)
[[ -n $tb ]] || dt_fail "no TensorBoard train run under tb-metrics/<name>-1 in the chief's state dir"
for tag in epoch_loss epoch_top2 epoch_mean_io_u batch_top2; do
  grep -aq "$tag" "$tb" || dt_fail "TensorBoard file $tb has no $tag"
done
tbv=$(find "$DT_TEST_TMP/metrics-w0" -path '*tb-metrics/*-1/validation/*' -name 'events.out.tfevents.*' | head -1)
[[ -n $tbv ]] || dt_fail "no TensorBoard validation run next to $tb"
for tag in epoch_loss epoch_top2 epoch_auc; do
  grep -aq "$tag" "$tbv" || dt_fail "TensorBoard file $tbv has no $tag"
done
grep -aq epoch_val_ "$tbv" && dt_fail "the validation run has val_ tags (Keras writes the training tags there)"

# Refused at submit, naming the metric.
jobs_spec "$DT_TEST_TMP/bad.json" 1 32
sed -i 's/"metrics": \["accuracy"\]/"metrics": ["accuracy", "f1_score"]/' "$DT_TEST_TMP/bad.json"
out=$(jc submit "$DT_TEST_TMP/bad.json" 2>&1) && dt_fail "a job with f1_score was accepted: $out"
dt_assert_contains "$out" '\$\.compile\.metrics\[1\]: "f1_score" is not supported' "refusal"
echo "ok: compiled metrics in watch, status, evaluate and TensorBoard; refusal"
