#!/usr/bin/env bash
# timeout: 240
# A sequence classifier on float rows: a CSV row of 12 timesteps x 2 features ("shape": [12, 2])
# -> LSTM(16) -> Dense(3 logits). Feature 0 holds a spike at one timestep, buried in noise, and
# the label is the third of the sequence it falls in, so the class depends on when, not on what:
# only a layer that carries state through the timesteps separates the classes. One daemon, then
# two: both learn (validation accuracy well above a third) and the two-daemon run follows the
# one-daemon run epoch by epoch. A second job stacks Embedding(mask_zero) -> Bidirectional(GRU)
# on token rows padded with 0 and must learn too (the masks reach the recurrent layer); its
# exported weights carry Keras's names and shapes (bidirectional/forward_gru/gru_cell/kernel).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

mkdir -p "$JOBS_DATA"
/usr/bin/python3 "$DT_SRC_DIR/test/ref/rnn_jobs_data.py" "$JOBS_DATA"

cat >"$DT_TEST_TMP/rnn.json" <<JSON
{"name": "rnn",
 "model": {"class_name": "Sequential", "config": {"name": "rnn", "layers": [
   {"class_name": "InputLayer", "config": {"batch_shape": [null, 12, 2], "name": "seq"}},
   {"class_name": "LSTM", "config": {"name": "lstm", "units": 16}},
   {"class_name": "Dense", "config": {"name": "out", "units": 3}}]}},
 "compile": {"optimizer": {"class_name": "Adam", "config": {"learning_rate": 0.02}},
             "loss": {"class_name": "SparseCategoricalCrossentropy", "config": {"from_logits": true}},
             "metrics": ["accuracy"]},
 "data": {"train": {"format": "csv", "files": ["train.csv"], "label_column": "label", "shape": [12, 2]},
          "validation": {"format": "csv", "files": ["val.csv"], "label_column": "label", "shape": [12, 2]},
          "shuffle": false, "seed": 7, "shard_policy": "DATA"},
 "fit": {"epochs": 6, "batch_size": 32}}
JSON

cat >"$DT_TEST_TMP/tok.json" <<JSON
{"name": "tok",
 "model": {"class_name": "Sequential", "config": {"name": "tok", "layers": [
   {"class_name": "InputLayer", "config": {"batch_shape": [null, 10], "dtype": "int32", "name": "tokens"}},
   {"class_name": "Embedding", "config": {"name": "embedding", "input_dim": 20, "output_dim": 8, "mask_zero": true}},
   {"class_name": "Bidirectional", "config": {"name": "bidirectional", "merge_mode": "concat",
     "layer": {"class_name": "GRU", "config": {"name": "gru", "units": 8}}}},
   {"class_name": "Dense", "config": {"name": "out", "units": 1, "activation": "sigmoid"}}]}},
 "compile": {"optimizer": {"class_name": "Adam", "config": {"learning_rate": 0.02}},
             "loss": "binary_crossentropy", "metrics": ["accuracy"]},
 "data": {"train": {"format": "csv", "files": ["tok_train.csv"], "label_column": "label"},
          "validation": {"format": "csv", "files": ["tok_val.csv"], "label_column": "label"},
          "shuffle": false, "seed": 7, "shard_policy": "DATA"},
 "fit": {"epochs": 6, "batch_size": 32}}
JSON

run_rnn() { # TAG N: the jobs on N daemons; their epoch_end events in TAG.jsonl, TAG-tok.jsonl
  local tag=$1 n=$2 i
  jobs_daemons "$n" "$tag"
  jc submit "$DT_TEST_TMP/rnn.json" --watch --json >"$DT_TEST_TMP/$tag.jsonl" ||
    dt_fail "the LSTM job on $n daemon(s) did not succeed: $(tail -1 "$DT_TEST_TMP/$tag.jsonl")"
  jc submit "$DT_TEST_TMP/tok.json" --watch --json >"$DT_TEST_TMP/$tag-tok.jsonl" ||
    dt_fail "the GRU job on $n daemon(s) did not succeed: $(tail -1 "$DT_TEST_TMP/$tag-tok.jsonl")"
  if [[ $n == 1 ]]; then # the final weights under Keras's names and shapes
    jc export 2 -o "$DT_TEST_TMP/tok.safetensors" >/dev/null || dt_fail "export of the GRU job"
    /usr/bin/python3 - "$DT_TEST_TMP/tok.safetensors" <<'PY' || dt_fail "the exported GRU weights"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
hdr = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
want = {"embedding/embeddings": [20, 8]}
for d in ("forward_gru", "backward_gru"):
    want[f"bidirectional/{d}/gru_cell/kernel"] = [8, 24]
    want[f"bidirectional/{d}/gru_cell/recurrent_kernel"] = [8, 24]
    want[f"bidirectional/{d}/gru_cell/bias"] = [2, 24]
for name, shape in want.items():
    assert hdr[name]["shape"] == shape, (name, hdr.get(name))
print("exported:", sorted(k for k in hdr if k != "__metadata__"))
PY
  fi
  for ((i = 0; i < n; i++)); do dt_stop_daemon "$tag-w$i" 10 || true; done
}
run_rnn one 1
run_rnn two 2

/usr/bin/python3 - "$DT_TEST_TMP" <<'PY' || dt_fail "the recurrent runs"
import json, sys
d = sys.argv[1]
def epochs(p):
    return [e["metrics"] for e in map(json.loads, open(f"{d}/{p}")) if e["kind"] == "epoch_end"]
for name, floor in (("", 0.8), ("-tok", 0.8)):
    one, two = epochs(f"one{name}.jsonl"), epochs(f"two{name}.jsonl")
    assert len(one) == len(two) == 6, (name, len(one), len(two))
    for k, (a, b) in enumerate(zip(one, two)):
        print("%s epoch %d: loss %.5f / %.5f, val_accuracy %.4f / %.4f" %
              (name or "lstm", k + 1, a["loss"], b["loss"], a["val_accuracy"], b["val_accuracy"]))
        # The same global batches; only the all-reduce's float sums may differ.
        assert abs(a["loss"] - b["loss"]) <= 5e-3 * abs(a["loss"]) + 1e-5, (name, k, a, b)
        assert abs(a["val_accuracy"] - b["val_accuracy"]) <= 0.03, (name, k, a, b)
    assert one[0]["loss"] > one[-1]["loss"], (name, "the loss did not fall")
    assert one[-1]["val_accuracy"] >= floor, (name, one[-1])
    assert two[-1]["val_accuracy"] >= floor, (name, two[-1])
PY
echo "ok: an LSTM and a masked Bidirectional GRU learn on 1 and 2 daemons alike"
