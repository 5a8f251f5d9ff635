#!/usr/bin/env bash
# demo-text.sh - what `make demo-text` shows: a text classifier trained on real text from Debian.
# scripts/text-prepare.py reads every package's one-line description from the APT lists
# (`apt-cache dumpavail`; `make deps` runs apt-get update) and labels it with its Debian section
# (admin, games, graphics, mail, math, net, science, sound, text, video), writes a vocabulary
# (ids from 2; 0 padding, 1 out of vocabulary) and CSV rows of padded token ids for
# train/validation/test, and computes a bag-of-words baseline (multinomial naive Bayes) on the
# same splits. Two dtraind daemons on 127.0.0.1 then train Embedding(mask_zero) ->
# Bidirectional(LSTM) -> Dense on the rows (DATA sharding), the chief evaluates the final
# weights on the test split, and the last line sets the two test accuracies side by side:
# "test accuracy: 0.XXXX (Embedding + Bidirectional LSTM), naive Bayes 0.XXXX, majority 0.XXXX".
# The daemons are stopped however the script ends.
#
# Environment: DT_BIN_DIR (default bin), DT_DEMO_DIR (default build/demo-text), DT_DEMO_WORKERS
# (default 2), DEMO_TEXT_QUICK=1 (4 sections, 300 descriptions each, 6 epochs: the test's mode,
# seconds), DEMO_TEXT_EPOCHS (default 5), DEMO_TEXT_SOURCE (a file of deb822 paragraphs instead
# of apt-cache dumpavail).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${DT_BIN_DIR:-bin}
DIR=${DT_DEMO_DIR:-build/demo-text}
N=${DT_DEMO_WORKERS:-2}
PY=/usr/bin/python3
[[ -x $PY ]] || PY=python3

prep=(--out "$DIR/data")
[[ -n ${DEMO_TEXT_SOURCE:-} ]] && prep+=(--source "$DEMO_TEXT_SOURCE")
epochs=${DEMO_TEXT_EPOCHS:-5}
if [[ ${DEMO_TEXT_QUICK:-0} == 1 ]]; then
  prep+=(--sections "games,science,sound,net" --per-class 300 --vocab 2000)
  epochs=6
fi
rm -rf "$DIR"
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd) # the daemons get --data-root "$DIR/data" and must not depend on our cwd
trap 'scripts/local-cluster.sh stop --dir "$DIR" >/dev/null 2>&1 || true' EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "scripts/text-prepare.py: Debian package descriptions labelled by section"
"$PY" scripts/text-prepare.py "${prep[@]}"
meta() { "$PY" -c 'import json,sys; m=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$DIR/data/meta.json" "$1"; }
input_dim=$(meta 'm["input_dim"]')
maxlen=$(meta 'm["maxlen"]')
classes=$(meta 'len(m["sections"])')
echo "first training rows (token ids, label) and their words:"
"$PY" - "$DIR/data" <<'PY'
import sys
d = sys.argv[1]
vocab = open(f"{d}/vocab.txt").read().split("\n")
labels = open(f"{d}/labels.txt").read().split("\n")
for line in open(f"{d}/train.csv").readlines()[1:4]:
    v = list(map(int, line.split(",")))
    print("  %s -> %-8s %s" % (v[:-1], labels[v[-1]], " ".join(vocab[t] for t in v[:-1] if t)))
PY

cat >"$DIR/job.json" <<JSON
{"name": "debian-text",
 "model": {"class_name": "Sequential", "config": {"name": "debian_text", "layers": [
   {"class_name": "InputLayer", "config": {"batch_shape": [null, $maxlen], "dtype": "int32", "name": "tokens"}},
   {"class_name": "Embedding", "config": {"name": "embedding", "input_dim": $input_dim, "output_dim": 32, "mask_zero": true}},
   {"class_name": "Bidirectional", "config": {"name": "bidirectional", "merge_mode": "concat",
     "layer": {"class_name": "LSTM", "config": {"name": "lstm", "units": 32}}}},
   {"class_name": "Dropout", "config": {"name": "dropout", "rate": 0.5}},
   {"class_name": "Dense", "config": {"name": "out", "units": $classes}}]}},
 "compile": {"optimizer": {"class_name": "Adam", "config": {"learning_rate": 0.004}},
             "loss": {"class_name": "SparseCategoricalCrossentropy", "config": {"from_logits": true}},
             "metrics": ["accuracy"]},
 "data": {"train": {"format": "csv", "files": ["train.csv"], "label_column": "label"},
          "validation": {"format": "csv", "files": ["val.csv"], "label_column": "label"},
          "shuffle": true, "seed": 7, "shard_policy": "DATA"},
 "fit": {"epochs": $epochs, "batch_size": 32}}
JSON

step "Starting $N dtraind daemons on 127.0.0.1 (scripts/local-cluster.sh $N)"
DT_BIN_DIR=$BIN scripts/local-cluster.sh "$N" --dir "$DIR" --timeout 60 -- --data-root "$DIR/data"
addr=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["address"])' "$DIR/worker-0.ready")
dt() { "$BIN/dtrain" --addr "$addr" --token-file "$DIR/token" "$@"; }

step "dtrain submit $DIR/job.json --watch (Embedding($input_dim, 32, mask_zero) -> Bidirectional(LSTM(32)) -> Dense($classes))"
out=$(dt submit "$DIR/job.json" --json)
id=$("$PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])' <<<"$out")
echo "job $id submitted"
rc=0
dt watch "$id" || rc=$?
if ((rc)); then
  dt status "$id" >&2 || true
  echo "demo-text: job $id did not succeed" >&2
  exit 1
fi

step "dtrain evaluate $id on the test split"
dt evaluate "$id" --data '{"format": "csv", "files": ["test.csv"], "label_column": "label"}' --json >"$DIR/evaluate.json"
cat "$DIR/evaluate.json"

step "Stopping the daemons"
scripts/local-cluster.sh stop --dir "$DIR"
trap - EXIT
"$PY" - "$DIR/evaluate.json" "$DIR/data/meta.json" <<'PY'
import json, sys
e, m = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
print("test accuracy: %.4f (Embedding + Bidirectional LSTM), naive Bayes %.4f, majority %.4f "
      "(%d test descriptions, %d sections)" % (e["accuracy"], m["naive_bayes_accuracy"],
      m["majority_accuracy"], m["examples"]["test"], len(m["sections"])))
PY
