#!/usr/bin/env bash
# timeout: 60
# dtrain data inspect on the real Fashion-MNIST: --json keys (DESIGN.md), the label histogram,
# the sharding plan, --help, and exit 2 with a message naming the file on bad input.
set -euo pipefail
F=/usr/share/datasets/fashion-mnist
[[ -r $F/train-images-idx3-ubyte.gz ]] || { echo "SKIP: dataset-fashion-mnist not installed"; exit 7; }
DTRAIN=$DT_BIN_DIR/dtrain
T=${DT_TEST_TMP:-$(mktemp -d)}
PY=/usr/bin/python3

"$DTRAIN" data inspect --help | grep -q "dtrain data inspect FILE"
"$DTRAIN" data inspect "$F/train-images-idx3-ubyte.gz" "$F/train-labels-idx1-ubyte.gz" \
  --json --replicas 4 --policy AUTO --batch 64 >"$T/out.json"
$PY - "$T/out.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
img, lab = d["files"]
assert img["format"] == "idx.gz" and img["records"] == 60000, img
assert img["features"]["image"] == {"dtype": "uint8", "shape": [28, 28]}, img
assert lab["records"] == 60000 and lab["features"]["label"]["shape"] == []
assert lab["label_histogram"] == [6000] * 10, lab
s = d["sharding"]
assert s["resolved"] == "DATA" and s["replicas"] == 4, s
assert [x["records"] for x in s["shards"]] == [15000] * 4, s
assert s["steps_per_epoch"] == 938, s
PYEOF

# human output is a table
"$DTRAIN" data inspect "$F/t10k-labels-idx1-ubyte.gz" | grep -q "label histogram"

# bad files: exit 2 with the file in the message, never a crash
head -c 1000 "$F/t10k-images-idx3-ubyte.gz" >"$T/trunc.gz"
set +e
"$DTRAIN" data inspect "$T/trunc.gz" 2>"$T/err"; rc=$?
set -e
[[ $rc == 2 ]] || { echo "expected exit 2, got $rc"; exit 1; }
grep -q "trunc.gz" "$T/err" || { cat "$T/err"; exit 1; }
set +e
"$DTRAIN" data inspect "$F/t10k-labels-idx1-ubyte.gz" --replicas 2 --policy FILE 2>"$T/err"; rc=$?
set -e
[[ $rc == 2 ]] && grep -q "at least one file per worker" "$T/err"
set +e
"$DTRAIN" data inspect 2>/dev/null; rc=$?
set -e
[[ $rc == 2 ]]
# a count that is not a whole number is refused, not read as 0 or 2
set +e
"$DTRAIN" data inspect "$F/t10k-labels-idx1-ubyte.gz" --replicas 2x --policy DATA 2>"$T/err"; rc=$?
set -e
[[ $rc == 2 ]] || { echo "--replicas 2x: exit $rc" >&2; exit 1; }
grep -q -- "--replicas must be" "$T/err"
echo "ok"
