#!/usr/bin/env bash
# timeout: 240
# 2 daemons follow 1 for the recurrent classes jobs_rnn.sh leaves out, with DATA sharding and no
# shuffling: a GRU in Keras 2's form (reset_after false: the reset gate before the recurrent
# GEMM of the candidate) on CSV rows of 12 timesteps x 2 features, and Embedding(mask_zero) ->
# Bidirectional(LSTM, merge_mode "sum") on token rows padded with 0 (the masked steps keep each
# direction's state). jobs_rnn.sh's data: the class of a float row is the third of the sequence
# a spike falls in; a token row's label is whether token 1 comes before token 2. Each job on one
# daemon, then on two: the epoch losses agree within 1e-3 relative (the same global batches;
# only the all-reduce's float sums differ), the validation accuracies within 0.03, the loss falls
# and the last validation accuracy is at least 0.8 on both.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

mkdir -p "$JOBS_DATA"
/usr/bin/python3 "$DT_SRC_DIR/test/ref/rnn_jobs_data.py" "$JOBS_DATA"

cat >"$DT_TEST_TMP/gru.json" <<JSON
{"name": "gru",
 "model": {"class_name": "Sequential", "config": {"name": "gru", "layers": [
   {"class_name": "InputLayer", "config": {"batch_input_shape": [null, 12, 2], "name": "seq"}},
   {"class_name": "GRU", "config": {"name": "gru", "units": 16, "reset_after": false}},
   {"class_name": "Dense", "config": {"name": "out", "units": 3}}]}},
 "compile": {"optimizer": {"class_name": "Adam", "config": {"learning_rate": 0.02}},
             "loss": {"class_name": "SparseCategoricalCrossentropy", "config": {"from_logits": true}},
             "metrics": ["accuracy"]},
 "data": {"train": {"format": "csv", "files": ["train.csv"], "label_column": "label", "shape": [12, 2]},
          "validation": {"format": "csv", "files": ["val.csv"], "label_column": "label", "shape": [12, 2]},
          "shuffle": false, "seed": 7, "shard_policy": "DATA"},
 "fit": {"epochs": 6, "batch_size": 32}}
JSON

cat >"$DT_TEST_TMP/bilstm.json" <<JSON
{"name": "bilstm",
 "model": {"class_name": "Sequential", "config": {"name": "bilstm", "layers": [
   {"class_name": "InputLayer", "config": {"batch_shape": [null, 10], "dtype": "int32", "name": "tokens"}},
   {"class_name": "Embedding", "config": {"name": "embedding", "input_dim": 20, "output_dim": 8, "mask_zero": true}},
   {"class_name": "Bidirectional", "config": {"name": "bidirectional", "merge_mode": "sum",
     "layer": {"class_name": "LSTM", "config": {"name": "lstm", "units": 12}}}},
   {"class_name": "Dense", "config": {"name": "out", "units": 1, "activation": "sigmoid"}}]}},
 "compile": {"optimizer": {"class_name": "Adam", "config": {"learning_rate": 0.02}},
             "loss": "binary_crossentropy", "metrics": ["accuracy"]},
 "data": {"train": {"format": "csv", "files": ["tok_train.csv"], "label_column": "label"},
          "validation": {"format": "csv", "files": ["tok_val.csv"], "label_column": "label"},
          "shuffle": false, "seed": 7, "shard_policy": "DATA"},
 "fit": {"epochs": 6, "batch_size": 32}}
JSON

run_jobs() { # TAG N: both jobs on N daemons; their events in TAG-gru.jsonl, TAG-bilstm.jsonl
  local tag=$1 n=$2 i job
  jobs_daemons "$n" "$tag"
  for job in gru bilstm; do
    jc submit "$DT_TEST_TMP/$job.json" --watch --json >"$DT_TEST_TMP/$tag-$job.jsonl" ||
      dt_fail "the $job job on $n daemon(s) did not succeed: $(tail -1 "$DT_TEST_TMP/$tag-$job.jsonl")"
  done
  for ((i = 0; i < n; i++)); do dt_stop_daemon "$tag-w$i" 10 || true; done
}
run_jobs one 1
run_jobs two 2

/usr/bin/python3 - "$DT_TEST_TMP" <<'PY' || dt_fail "the recurrent runs"
import json, sys
d = sys.argv[1]
def epochs(p):
    return [e["metrics"] for e in map(json.loads, open(f"{d}/{p}")) if e["kind"] == "epoch_end"]
for name in ("gru", "bilstm"):
    one, two = epochs(f"one-{name}.jsonl"), epochs(f"two-{name}.jsonl")
    assert len(one) == len(two) == 6, (name, len(one), len(two))
    for k, (a, b) in enumerate(zip(one, two)):
        print("%s epoch %d: loss %.5f / %.5f, val_accuracy %.4f / %.4f" %
              (name, k + 1, a["loss"], b["loss"], a["val_accuracy"], b["val_accuracy"]))
        assert abs(a["loss"] - b["loss"]) <= 1e-3 * abs(a["loss"]) + 1e-6, (name, k, a, b)
        assert abs(a["val_accuracy"] - b["val_accuracy"]) <= 0.03, (name, k, a, b)
    assert one[0]["loss"] > one[-1]["loss"], (name, "the loss did not fall")
    assert one[-1]["val_accuracy"] >= 0.8, (name, one[-1])
    assert two[-1]["val_accuracy"] >= 0.8, (name, two[-1])
PY
echo "ok: a Keras 2 GRU and a masked Bidirectional(LSTM, sum) learn on 1 and 2 daemons alike"
