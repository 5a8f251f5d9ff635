#!/usr/bin/env bash
# timeout: 180
# A text classifier on token ids: an int32 InputLayer, Embedding(mask_zero) ->
# GlobalAveragePooling1D (the mean over the real tokens) -> Dense(sigmoid), binary cross-entropy
# on 0/1 labels, trained from CSV rows of 20 token ids padded with 0. The label says whether a
# sentence holds more "positive" tokens (1-10) than "negative" ones (11-20), so the masked mean
# separates the classes and a padded mean would blur them. One daemon, then two: both learn
# (validation accuracy well above chance) and the two-daemon run follows the one-daemon run
# epoch by epoch. A token id past input_dim fails the job, naming the layer and the id.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

mkdir -p "$JOBS_DATA"
/usr/bin/python3 - "$JOBS_DATA" <<'PY'
import random, sys
d = sys.argv[1]
def write(name, n, seed, bad=False):
    r = random.Random(seed)
    with open(f"{d}/{name}", "w") as f:
        f.write(",".join([f"t{i}" for i in range(20)] + ["label"]) + "\n")
        for k in range(n):
            while True:
                length = r.randrange(4, 21)
                ids = [r.randrange(1, 50) for _ in range(length)]
                pos = sum(1 <= t <= 10 for t in ids)
                neg = sum(11 <= t <= 20 for t in ids)
                if pos != neg:
                    break
            if bad and k == 37:
                ids[0] = 50
            f.write(",".join(str(t) for t in ids + [0] * (20 - length)) + f",{int(pos > neg)}\n")
write("train.csv", 1024, 1)
write("val.csv", 256, 2)
write("bad.csv", 64, 3, bad=True)
PY

text_spec() {
  local file=$1 train=$2
  cat >"$file" <<JSON
{"name": "text",
 "model": {"class_name": "Sequential", "config": {"name": "text", "layers": [
   {"class_name": "InputLayer", "config": {"batch_shape": [null, 20], "dtype": "int32", "sparse": false, "name": "tokens"}},
   {"class_name": "Embedding", "config": {"name": "embedding", "input_dim": 50, "output_dim": 8, "mask_zero": true}},
   {"class_name": "GlobalAveragePooling1D", "config": {"name": "mean"}},
   {"class_name": "Dense", "config": {"name": "out", "units": 1, "activation": "sigmoid"}}]}},
 "compile": {"optimizer": {"class_name": "Adam", "config": {"learning_rate": 0.02}},
             "loss": "binary_crossentropy", "metrics": ["accuracy"]},
 "data": {"train": {"format": "csv", "files": ["$train"], "label_column": "label"},
          "validation": {"format": "csv", "files": ["val.csv"], "label_column": "label"},
          "shuffle": false, "seed": 7, "shard_policy": "DATA"},
 "fit": {"epochs": 6, "batch_size": 32}}
JSON
}
text_spec "$DT_TEST_TMP/text.json" train.csv
text_spec "$DT_TEST_TMP/bad.json" bad.csv

run_text() { # TAG N: the job on N daemons; its epoch_end events in TAG.jsonl
  local tag=$1 n=$2 i
  jobs_daemons "$n" "$tag"
  jc submit "$DT_TEST_TMP/text.json" --watch --json >"$DT_TEST_TMP/$tag.jsonl" ||
    dt_fail "the text job on $n daemon(s) did not succeed: $(tail -1 "$DT_TEST_TMP/$tag.jsonl")"
  if [[ $n == 1 ]]; then
    # The same daemon refuses an id past input_dim, naming the layer and the id.
    jc submit "$DT_TEST_TMP/bad.json" --watch --json >"$DT_TEST_TMP/bad.jsonl" &&
      dt_fail "a job with token id 50 for input_dim 50 succeeded"
    err=$(jc status 2 --json | dt_json_get error || true)
    echo "error: $err"
    dt_assert_contains "$err" "Embedding 'embedding'" "the error names the layer"
    dt_assert_contains "$err" "input id 50 .sample 5 of the batch, position 0. is outside .0, 50." \
      "the error names the id and where it is"
  fi
  for ((i = 0; i < n; i++)); do dt_stop_daemon "$tag-w$i" 10 || true; done
}
run_text one 1
run_text two 2

/usr/bin/python3 - "$DT_TEST_TMP/one.jsonl" "$DT_TEST_TMP/two.jsonl" <<'PY' || dt_fail "the text runs"
import json, sys
def epochs(p):
    return [e["metrics"] for e in map(json.loads, open(p)) if e["kind"] == "epoch_end"]
one, two = epochs(sys.argv[1]), epochs(sys.argv[2])
assert len(one) == len(two) == 6, (len(one), len(two))
for k, (a, b) in enumerate(zip(one, two)):
    print("epoch %d: loss %.5f / %.5f, val_accuracy %.4f / %.4f" %
          (k + 1, a["loss"], b["loss"], a["val_accuracy"], b["val_accuracy"]))
    # The same global batches; only the all-reduce's float sums may differ.
    assert abs(a["loss"] - b["loss"]) <= 2e-3 * abs(a["loss"]) + 1e-5, (k, a, b)
    assert abs(a["val_accuracy"] - b["val_accuracy"]) <= 0.02, (k, a, b)
assert one[0]["loss"] > one[-1]["loss"], "the loss did not fall"
assert one[-1]["val_accuracy"] >= 0.85, one[-1]
assert two[-1]["val_accuracy"] >= 0.85, two[-1]
PY
echo "ok: a masked text classifier learns on 1 and 2 daemons alike"
