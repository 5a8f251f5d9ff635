#!/usr/bin/env bash
# timeout: 240
# Keras's "text classification with Transformer" block as a job: int32 token ids ->
# Embedding(mask_zero) -> MultiHeadAttention(x, x) -> Dropout -> Add -> LayerNormalization ->
# Dense(relu) -> Dense -> Add -> LayerNormalization -> GlobalAveragePooling1D -> Dropout ->
# Dense(sigmoid), written as Keras 3's to_json() writes a Functional model. Sentences of 6-24
# ids padded with 0; the label says whether a sentence holds one of the "trigger" ids 3 and 7.
# It trains on one daemon and on two (DATA sharding, no shuffle, dropout 0): both learn
# (validation accuracy >= 0.9) and the two-daemon run follows the one-daemon run epoch by epoch.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

mkdir -p "$JOBS_DATA"
/usr/bin/python3 - "$JOBS_DATA" "$DT_TEST_TMP/model.json" <<'PY'
import json, random, sys
data, model_path = sys.argv[1], sys.argv[2]
T = 24
# Keras's example drops 0.1; without dropout the two runs draw nothing and must agree
DROP = 0.0

def sentences(path, n, seed):
    r = random.Random(seed)
    with open(path, "w") as f:
        f.write(",".join(f"w{i}" for i in range(T)) + ",label\n")
        for k in range(n):
            length = r.randrange(6, T + 1)
            ids = [r.choice([i for i in range(1, 60) if i not in (3, 7)]) for _ in range(length)]
            label = k % 2
            if label:
                ids[r.randrange(length)] = r.choice((3, 7))
            f.write(",".join(map(str, ids + [0] * (T - length))) + f",{label}\n")

sentences(f"{data}/tr_train.csv", 1536, 11)
sentences(f"{data}/tr_val.csv", 256, 12)

def tensor(name):
    return {"class_name": "__keras_tensor__",
            "config": {"shape": [None, T, 16], "dtype": "float32", "keras_history": [name, 0, 0]}}

layers = [{"class_name": "InputLayer", "name": "tokens", "inbound_nodes": [],
           "config": {"batch_shape": [None, T], "dtype": "int32", "sparse": False,
                      "name": "tokens"}}]

def add(cls, name, cfg, *args, **kw):
    cfg = dict(cfg, name=name, trainable=True, dtype="float32")
    layers.append({"module": "keras.layers", "class_name": cls, "name": name, "config": cfg,
                   "registered_name": None,
                   "inbound_nodes": [{"args": [tensor(a) if isinstance(a, str) else
                                               [tensor(x) for x in a] for a in args],
                                      "kwargs": kw}]})

add("Embedding", "embed", {"input_dim": 60, "output_dim": 16, "mask_zero": True}, "tokens")
add("MultiHeadAttention", "attention",
    {"num_heads": 2, "key_dim": 16, "value_dim": None, "dropout": 0.0, "use_bias": True,
     "output_shape": None, "attention_axes": None, "kernel_regularizer": None,
     "bias_regularizer": None, "activity_regularizer": None, "kernel_constraint": None,
     "bias_constraint": None, "seed": None,
     "kernel_initializer": {"module": "keras.initializers", "class_name": "GlorotUniform",
                            "config": {"seed": None}, "registered_name": None},
     "bias_initializer": {"module": "keras.initializers", "class_name": "Zeros", "config": {},
                          "registered_name": None}},
    "embed", "embed")
add("Dropout", "drop1", {"rate": DROP, "seed": None, "noise_shape": None}, "attention")
add("Add", "add1", {}, ["embed", "drop1"])
add("LayerNormalization", "norm1", {"axis": [-1], "epsilon": 1e-6, "center": True, "scale": True},
    "add1")
add("Dense", "ffn1", {"units": 32, "activation": "relu", "use_bias": True}, "norm1")
add("Dense", "ffn2", {"units": 16, "activation": "linear", "use_bias": True}, "ffn1")
add("Add", "add2", {}, ["norm1", "ffn2"])
add("LayerNormalization", "norm2", {"axis": [-1], "epsilon": 1e-6, "center": True, "scale": True},
    "add2")
add("GlobalAveragePooling1D", "pool", {"data_format": "channels_last", "keepdims": False}, "norm2")
add("Dropout", "drop2", {"rate": DROP, "seed": None, "noise_shape": None}, "pool")
add("Dense", "out", {"units": 1, "activation": "sigmoid", "use_bias": True}, "drop2")
json.dump({"module": "keras", "class_name": "Functional", "registered_name": "Functional",
           "config": {"name": "transformer", "trainable": True, "layers": layers,
                      "input_layers": [["tokens", 0, 0]], "output_layers": [["out", 0, 0]]}},
          open(model_path, "w"))
PY

cat >"$DT_TEST_TMP/job.json" <<JSON
{"name": "transformer",
 "model": $(cat "$DT_TEST_TMP/model.json"),
 "compile": {"optimizer": {"class_name": "Adam", "config": {"learning_rate": 0.003}},
             "loss": "binary_crossentropy", "metrics": ["accuracy"]},
 "data": {"train": {"format": "csv", "files": ["tr_train.csv"], "label_column": "label"},
          "validation": {"format": "csv", "files": ["tr_val.csv"], "label_column": "label"},
          "shuffle": false, "seed": 5, "shard_policy": "DATA"},
 "fit": {"epochs": 4, "batch_size": 32}}
JSON

run_job() { # TAG N: the job on N daemons; its events in TAG.jsonl
  local tag=$1 n=$2 i
  jobs_daemons "$n" "$tag"
  jc submit "$DT_TEST_TMP/job.json" --watch --json >"$DT_TEST_TMP/$tag.jsonl" ||
    dt_fail "the Transformer job on $n daemon(s) did not succeed: $(tail -1 "$DT_TEST_TMP/$tag.jsonl")"
  for ((i = 0; i < n; i++)); do dt_stop_daemon "$tag-w$i" 10 || true; done
}
"$DT_BIN_DIR/dtrain" summary "$DT_TEST_TMP/model.json" >"$DT_TEST_TMP/summary" ||
  dt_fail "dtrain summary refused the Transformer model: $(cat "$DT_TEST_TMP/summary")"
grep -E "attention|Total" "$DT_TEST_TMP/summary"
# Keras: query, key and value 3 x (16*2*16 + 2*16), attention_output 2*16*16 + 16: 2,160
dt_assert_contains "$(grep attention "$DT_TEST_TMP/summary")" "2,160" "the attention layer's parameter count"
run_job one 1
run_job two 2

/usr/bin/python3 - "$DT_TEST_TMP/one.jsonl" "$DT_TEST_TMP/two.jsonl" <<'PY' || dt_fail "the Transformer runs"
import json, sys
runs = []
for path, label in zip(sys.argv[1:], ("1 daemon", "2 daemons")):
    ends = [e["metrics"] for e in map(json.loads, open(path)) if e["kind"] == "epoch_end"]
    assert len(ends) == 4, (label, len(ends))
    print(label, " ".join("%.4f/%.3f" % (m["loss"], m["val_accuracy"]) for m in ends))
    assert ends[-1]["loss"] < ends[0]["loss"], (label, "the loss did not fall")
    assert ends[-1]["val_accuracy"] >= 0.9, (label, ends[-1])
    runs.append(ends)
# the same global batches (DATA, no shuffle): only the all-reduce's float sums differ
for k, (a, b) in enumerate(zip(*runs)):
    assert abs(a["loss"] - b["loss"]) <= 2e-3 * abs(a["loss"]) + 1e-5, (k, a["loss"], b["loss"])
PY
echo "ok: the Transformer text classifier learns on 1 and 2 daemons"
