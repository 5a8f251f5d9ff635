#!/usr/bin/env bash
# timeout: 180
# Weights larger than one message: a job whose model has ~76 MB of weights (Dense 784 -> 24000
# -> 10, over the 64 MiB gRPC message) trains 2 steps on Fashion-MNIST on 2 daemons; `dtrain export` fetches the final weights in
# pieces and the file holds exactly the chief's final tensors, `export --checkpoint` the
# checkpoint's, and an evaluator task follows the job and evaluates its final weights.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

FM=/usr/share/datasets/fashion-mnist
[[ -r $FM/t10k-images-idx3-ubyte.gz ]] || dt_skip "no Fashion-MNIST under $FM"

# Real images, few of them: 256 to train on, 200 to validate (IDX, uncompressed).
mkdir -p "$JOBS_DATA"
/usr/bin/python3 - "$FM" "$JOBS_DATA" <<'PY'
import gzip, struct, sys
src, dst = sys.argv[1], sys.argv[2]
img = gzip.open(f"{src}/t10k-images-idx3-ubyte.gz").read()
lab = gzip.open(f"{src}/t10k-labels-idx1-ubyte.gz").read()
def write(stem, lo, n):
    with open(f"{dst}/{stem}-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28) + img[16 + lo * 784:16 + (lo + n) * 784])
    with open(f"{dst}/{stem}-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + lab[8 + lo:8 + lo + n])
write("train", 0, 256)
write("val", 256, 200)
PY
cat >"$DT_TEST_TMP/big.json" <<'JSON'
{"name": "big",
 "model": {"class_name": "Sequential", "config": {"name": "big", "layers": [
   {"class_name": "InputLayer", "config": {"batch_input_shape": [null, 28, 28, 1], "name": "in"}},
   {"class_name": "Flatten", "config": {"name": "flat"}},
   {"class_name": "Dense", "config": {"name": "hidden", "units": 24000, "activation": "relu"}},
   {"class_name": "Dense", "config": {"name": "out", "units": 10}}]}},
 "compile": {"optimizer": {"class_name": "Adam", "config": {"learning_rate": 0.001}},
             "loss": {"class_name": "SparseCategoricalCrossentropy", "config": {"from_logits": true}},
             "metrics": ["accuracy"]},
 "data": {"train": {"format": "idx", "images": "train-images-idx3-ubyte", "labels": "train-labels-idx1-ubyte",
                    "scale": 0.00392156862745098, "image_shape": [28, 28, 1]},
          "validation": {"format": "idx", "images": "val-images-idx3-ubyte", "labels": "val-labels-idx1-ubyte",
                         "scale": 0.00392156862745098, "image_shape": [28, 28, 1]},
          "shuffle": false, "seed": 7, "shard_policy": "DATA"},
 "fit": {"epochs": 1, "batch_size": 16, "steps_per_epoch": 2},
 "checkpoint": {"save_freq": "epoch", "keep": 2}}
JSON

jobs_daemons 2 xl
EV=$DT_TEST_TMP/xl-eval
mkdir -p "$EV"
dt_start_daemon xl-eval TF_CONFIG="$(dt_tfconfig_json evaluator 0 "worker=${JOBS_ADDRS[0]},${JOBS_ADDRS[1]}")" -- \
  --state-dir "$EV" --data-root "$JOBS_DATA" --eval-interval 0.2 --ready-file "$EV.ready"
dt_wait_file "$EV.ready" --timeout 10 || dt_fail "the evaluator did not start"

jc submit "$DT_TEST_TMP/big.json" --watch --json >/dev/null || dt_fail "the job did not succeed: $(jc status 1)"

# Compares every model tensor of the chief's file with the exported one, byte for byte; the
# export has nothing else (no optimizer slots) and is over one message (64 MiB).
same_tensors() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import hashlib, json, struct, sys
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in h.items()}, len(b)
src, _ = load(sys.argv[1])
exp, size = load(sys.argv[2])
want = {k: v for k, v in src.items() if not k.startswith("optimizer/")}
assert size > 64 << 20, f"only {size} bytes: not over one message"
assert sorted(exp) == sorted(want) == ["hidden/bias", "hidden/kernel", "out/bias", "out/kernel"], (sorted(exp), sorted(want))
for k in want:
    assert exp[k] == want[k], f"tensor {k} differs"
print(f"{size} bytes, {len(exp)} tensors equal; sha256 {hashlib.sha256(open(sys.argv[2], 'rb').read()).hexdigest()[:16]}")
PY
}

t0=$(date +%s.%N)
jc export 1 -o "$DT_TEST_TMP/w.safetensors" --json >"$DT_TEST_TMP/export.json" || dt_fail "export"
t1=$(date +%s.%N)
echo "export of the final weights: $(/usr/bin/python3 -c "print(f'{$t1 - $t0:.2f}')") s wall: $(cat "$DT_TEST_TMP/export.json")"
dt_assert_eq "$(dt_json_get chunks "$DT_TEST_TMP/export.json")" 3 "pieces of a ~76 MB export"
dt_assert_eq "$(dt_json_get bytes "$DT_TEST_TMP/export.json")" "$(stat -c %s "$DT_TEST_TMP/w.safetensors")" "bytes"
src=$(dt_json_get source "$DT_TEST_TMP/export.json")
[[ $src == "$DT_TEST_TMP"/xl-w0/* ]] || dt_fail "the final weights come from $src, not the chief's state dir"
same_tensors "$src" "$DT_TEST_TMP/w.safetensors" || dt_fail "the export is not the chief's final weights"
ls "$DT_TEST_TMP"/w.safetensors.tmp-* 2>/dev/null && dt_fail "the export left its temp file"

# Again: served from the chief's converted file (one per source), same bytes.
jc export 1 -o "$DT_TEST_TMP/w2.safetensors" >/dev/null || dt_fail "second export"
cmp -s "$DT_TEST_TMP/w.safetensors" "$DT_TEST_TMP/w2.safetensors" || dt_fail "two exports differ"

jc export 1 --checkpoint -o "$DT_TEST_TMP/c.safetensors" --json >"$DT_TEST_TMP/ckpt.json" || dt_fail "export --checkpoint"
csrc=$(dt_json_get source "$DT_TEST_TMP/ckpt.json")
[[ $csrc == */checkpoints/ckpt-2.safetensors ]] || dt_fail "export --checkpoint came from $csrc"
dt_assert_eq "$(dt_json_get global_step "$DT_TEST_TMP/ckpt.json")" 2 "the checkpoint's step"
same_tensors "$csrc" "$DT_TEST_TMP/c.safetensors" || dt_fail "the export is not the chief's checkpoint"
n=$(ls "$DT_TEST_TMP"/xl-w0/jobs/1/.export-cache-* | wc -l)
dt_assert_eq "$n" 2 "converted files kept on the chief (final weights, checkpoint)"

# The chief's refusals (offsets, forged pins, a pinned source that vanished), from a C client.
probe_ok=0
for r in "$DT_BIN_DIR/../build/dt_test" "$DT_BIN_DIR/../dt_test" "$DT_SRC_DIR/build/dt_test"; do
  if [[ -x $r ]]; then
    DT_EXPORT_PROBE_ADDR=$JOBS_ADDR DT_EXPORT_PROBE_CKPT_DIR=$(dirname "$csrc") \
      "$r" --run-one export_rpc_refusals || dt_fail "the chief's export refusals (see above)"
    probe_ok=1
    break
  fi
done
((probe_ok)) || dt_fail "no dt_test binary next to $DT_BIN_DIR"

# A failed export leaves no file: an unknown job, and an output directory that does not exist.
rc=0; jc export 9 -o "$DT_TEST_TMP/x.safetensors" 2>"$DT_TEST_TMP/err" || rc=$?
dt_assert_eq "$rc" 2 "export of an unknown job"
[[ ! -e $DT_TEST_TMP/x.safetensors ]] || dt_fail "a failed export wrote a file"
rc=0; jc export 1 -o "$DT_TEST_TMP/nodir/x.safetensors" 2>"$DT_TEST_TMP/err" || rc=$?
dt_assert_eq "$rc" 1 "export into a missing directory"
dt_assert_contains "$DT_TEST_TMP/err" "nodir" "the message names the path"

# The evaluator fetched the same pieces and evaluated the final weights on the 200 images.
final_line() { grep -q '"final":true' "$EV/eval/1/eval.jsonl" 2>/dev/null; }
dt_wait_for final_line --timeout 60 || dt_fail "the evaluator did not evaluate the final weights: $(tail -5 "$DT_TEST_TMP/xl-eval.log")"
got=$(grep '"final":true' "$EV/eval/1/eval.jsonl")
echo "evaluator: $got"
dt_assert_eq "$(dt_json_get examples <<<"$got")" 200 "examples the evaluator saw"
cmp -s "$EV/eval/1/weights.safetensors" "$DT_TEST_TMP/w.safetensors" || dt_fail "the evaluator's weights differ from the export"
jc evaluate 1 --data "$DT_TEST_TMP/big.json" --json >"$DT_TEST_TMP/ref.json" || dt_fail "dtrain evaluate"
/usr/bin/python3 - "$got" "$DT_TEST_TMP/ref.json" <<'PY' || dt_fail "evaluator and dtrain evaluate disagree"
import json, sys
a, b = json.loads(sys.argv[1]), json.load(open(sys.argv[2]))
assert abs(a["loss"] - b["loss"]) <= 1e-5 * max(1.0, abs(b["loss"])), (a, b)
assert a["accuracy"] == b["accuracy"] and a["examples"] == b["examples"], (a, b)
PY
dt_stop_daemon xl-eval 5 || dt_fail "the evaluator did not exit 0 on SIGTERM"

# SIGTERM while the chief converts the weights for an export on its thread pool: the rpc server
# answers the call as it stops, and nothing answers it a second time (that aborted the daemon);
# the client fails cleanly and leaves no file.
dt_stop_daemon xl-w1 10 || dt_fail "worker:1 did not exit 0 on SIGTERM"
rm -f "$DT_TEST_TMP"/xl-w0/jobs/1/.export-cache-*
jc export 1 -o "$DT_TEST_TMP/late.safetensors" >/dev/null 2>"$DT_TEST_TMP/late.err" &
xp=$!
sleep 0.2
dt_stop_daemon xl-w0 10 || dt_fail "the chief did not exit 0 on SIGTERM during an export: $(grep -h 'assert' "$DT_TEST_TMP/xl-w0.log")"
rc=0
timeout 30 tail --pid="$xp" -f /dev/null || dt_fail "export did not end after the chief stopped"
wait "$xp" || rc=$?
if ((rc != 0)); then
  ! ls "$DT_TEST_TMP"/late.safetensors* >/dev/null 2>&1 || dt_fail "a failed export left a file"
fi
! grep -l "Sanitizer\|runtime error" "$DT_TEST_TMP"/xl-*.log || dt_fail "sanitizer reports in the daemons' logs"
echo "ok: export in pieces (final weights, checkpoint), evaluator"
