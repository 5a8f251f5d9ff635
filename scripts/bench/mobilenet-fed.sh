#!/usr/bin/env bash
# mobilenet-fed.sh - does the image pipeline keep the CPU engine fed? One dtraind daemon trains
# tf.keras.applications.MobileNetV2(input_shape=(96, 96, 3), weights=None, classes=2) (as
# test/ref/mobilenet_v2_json.py writes its JSON) on a class folder of PIL-written photos of mixed
# sizes (scripts/bench/make_photos.py: JPEG quality 90, a few PNG), resized to 96x96 by the data
# spec, and reads the daemon's log: the decode line of the image folder and each epoch's
# step-phase line ("data D, forward+backward F, ..."). Prints per epoch the step, its data wait
# and the fraction of the step that waited for data, and the one-off decode against the run.
#
#   scripts/bench/mobilenet-fed.sh [PHOTOS] [BATCH] [EPOCHS]   (defaults 320 32 2)
#   Environment: THREADS (the daemon's compute threads, default: its own choice),
#   DECODE_THREADS (num_parallel_calls, default AUTOTUNE), MIN_PX/MAX_PX (photo sides, 120/400),
#   KEEP=1 (leave the temporary folder with the logs), DT_BIN_DIR (dtraind and dtrain; bin).
# Output: a table, then one JSON line (photos, batch, epochs, decode_s, run_s, epochs: [{epoch,
# step_ms, data_ms, compute_ms, data_fraction}]).
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-320}
BATCH=${2:-32}
EPOCHS=${3:-2}
PY=/usr/bin/python3
BIN=${DT_BIN_DIR:-bin}
[[ -x $BIN/dtraind && -x $BIN/dtrain ]] || make -j2 >/dev/null
if ! $PY -c 'import PIL, numpy' 2>/dev/null; then
  echo "mobilenet-fed: $PY has no PIL/numpy (apt-get install python3-pil python3-numpy)" >&2
  exit 2
fi
tmp=$(mktemp -d)
cleanup() {
  scripts/local-cluster.sh stop --dir "$tmp/cluster" >/dev/null 2>&1 || true
  if [[ ${KEEP:-0} == 1 ]]; then echo "mobilenet-fed: kept $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
mkdir -p "$tmp/data"
$PY scripts/bench/make_photos.py "$tmp/data/photos" "$N" "${MIN_PX:-120}" "${MAX_PX:-400}" 3 \
  --png $((N / 20)) >/dev/null
$PY test/ref/mobilenet_v2_json.py 96 2 >"$tmp/data/mobilenet_v2.json"
dec=${DECODE_THREADS:-\"AUTOTUNE\"}
cat >"$tmp/data/job.json" <<JSON
{"name": "mobilenet_fed", "model": "mobilenet_v2.json",
 "compile": {"optimizer": {"class_name": "SGD", "config": {"learning_rate": 0.01}},
             "loss": "sparse_categorical_crossentropy", "metrics": ["accuracy"]},
 "data": {"train": {"format": "image_folder", "directory": "photos", "image_size": [96, 96],
                    "color_mode": "rgb", "label_mode": "int", "scale": 0.00392156862745098},
          "shuffle": true, "seed": 7, "num_parallel_calls": $dec},
 "fit": {"epochs": $EPOCHS, "batch_size": $BATCH}}
JSON
flags=(--data-root "$tmp/data")
[[ -n ${THREADS:-} ]] && flags+=(--threads "$THREADS")
DT_BIN_DIR=$BIN scripts/local-cluster.sh 1 --dir "$tmp/cluster" --timeout 60 -- "${flags[@]}" >/dev/null
addr=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["address"])' "$tmp/cluster/worker-0.ready")
t0=$(date +%s.%N)
if ! "$BIN/dtrain" --addr "$addr" --token-file "$tmp/cluster/token" submit "$tmp/data/job.json" \
  --watch --json >"$tmp/events.jsonl"; then
  echo "mobilenet-fed: the job did not succeed: $(tail -1 "$tmp/events.jsonl")" >&2
  tail -20 "$tmp/cluster/worker-0.log" >&2
  exit 1
fi
t1=$(date +%s.%N)
scripts/local-cluster.sh stop --dir "$tmp/cluster" >/dev/null
$PY - "$tmp/cluster/worker-0.log" "$N" "$BATCH" "$EPOCHS" "$t0" "$t1" <<'PYEOF'
import json, re, sys
log, n, batch, epochs, t0, t1 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
text = open(log, errors="replace").read()
dec = re.search(r"image_folder \S+: decoded (\d+) of (\d+) files.* in ([0-9.]+) s on (\d+) threads \(([0-9]+)/s\)", text)
rows = []
for m in re.finditer(r"epoch (\d+): ([0-9.]+) ms/step over (\d+) steps: data ([0-9.]+), forward\+backward ([0-9.]+)", text):
    e, step, steps, data, comp = int(m[1]), float(m[2]), int(m[3]), float(m[4]), float(m[5])
    rows.append(dict(epoch=e, steps=steps, step_ms=step, data_ms=data, compute_ms=comp,
                     data_fraction=data / step if step else 0.0))
if not dec or len(rows) != epochs:
    sys.exit("mobilenet-fed: the daemon's log lacks the decode line or the %d step-phase lines (%s)" % (epochs, log))
# the log gives the seconds to 0.1 and the rate to 1/s: the files over the rate is finer
decode_s = int(dec[1]) / float(dec[5]) if float(dec[5]) > 0 else float(dec[3])
run_s = t1 - t0
print("MobileNetV2 96x96x3, 2 classes, batch %d: %s photos (JPEG/PNG, mixed sizes) -> 96x96" % (batch, dec[2]))
print("decode+resize before the first step: %.2f s on %s threads (%s images/s); the job %.1f s from submit" % (decode_s, dec[4], dec[5], run_s))
print("%-6s %6s %10s %9s %12s %9s" % ("epoch", "steps", "step ms", "data ms", "fwd+bwd ms", "data %"))
for r in rows:
    print("%-6d %6d %10.2f %9.3f %12.2f %8.3f%%" % (r["epoch"], r["steps"], r["step_ms"], r["data_ms"], r["compute_ms"], 100 * r["data_fraction"]))
print(json.dumps(dict(photos=int(dec[2]), batch=batch, epochs=epochs, decode_s=round(decode_s, 3), decode_threads=int(dec[4]), run_s=round(run_s, 2), epochs_phase=rows)))
PYEOF
