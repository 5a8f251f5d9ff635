#!/usr/bin/env bash
# timeout: 180
# JPEG bytes in TFRecord files (image/encoded, image/class/label, as TF's image TFRecords are
# written; framed here with Python's CRC-32C) train the tutorial CNN on 2 daemons with FILE
# sharding: 4 files of 24 records, record 6 of part1 cut inside its JPEG, "on_error": "skip".
# Each worker decodes only its own 2 files' images (its log says how many records), worker 1
# skips the cut record with its step one example short, and both plan with all 96 records.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"
/usr/bin/python3 -c 'import PIL, numpy' 2>/dev/null || dt_skip "python3-pil is missing (make deps installs it)"
ROOT=$DT_TEST_TMP/tfr
mkdir -p "$ROOT"
/usr/bin/python3 - "$ROOT" <<'PY' || dt_fail "writing the TFRecord files"
import io, struct, sys
import numpy as np
from PIL import Image
root = sys.argv[1]
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 & -(c & 1))
    return c ^ 0xFFFFFFFF
mask = lambda c: (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF
def varint(n):
    o = b""
    while True:
        b = n & 0x7F; n >>= 7
        o += bytes([b | (0x80 if n else 0)])
        if not n: return o
ld = lambda tag, b: bytes([tag]) + varint(len(b)) + b
def example(feats):
    ents = b"".join(ld(0x0A, ld(0x0A, k.encode()) + ld(0x12, v)) for k, v in feats.items())
    return ld(0x0A, ents)
r = np.random.RandomState(3)
for f in range(4):
    with open(f"{root}/part{f}.tfrecord", "wb") as out:
        for i in range(24):
            c = (f * 24 + i) % 2  # horizontal or vertical stripes, 40-80 px, grayscale
            h, w = r.randint(40, 81, 2)
            y, x = np.mgrid[0:h, 0:w]
            img = ((((y if c == 0 else x) // 4) % 2) * 180 + r.randint(0, 60, (h, w))).astype(np.uint8)
            b = io.BytesIO()
            Image.fromarray(img, "L").save(b, "JPEG", quality=90)
            jpg = b.getvalue()
            if f == 1 and i == 6:
                jpg = jpg[:len(jpg) * 2 // 3]
            ex = example({"image/encoded": ld(0x0A, ld(0x0A, jpg)),
                          "image/class/label": ld(0x1A, ld(0x0A, varint(c)))})
            hdr = struct.pack("<Q", len(ex))
            out.write(hdr + struct.pack("<I", mask(crc32c(hdr))) + ex + struct.pack("<I", mask(crc32c(ex))))
PY
JOBS_DATA=$ROOT
jobs_daemons 2 tfr
cp "$DT_SRC_DIR/config/models/fmnist_cnn.json" "$DT_TEST_TMP/model.json"
cat >"$DT_TEST_TMP/job.json" <<JSON
{"name": "tfrecord-jpeg", "model": "model.json",
 "compile": {"optimizer": {"class_name": "Adam", "config": {"learning_rate": 0.001}},
             "loss": {"class_name": "SparseCategoricalCrossentropy", "config": {"from_logits": true}},
             "metrics": ["accuracy"]},
 "data": {"train": {"format": "tfrecord", "files": ["part0.tfrecord", "part1.tfrecord",
                    "part2.tfrecord", "part3.tfrecord"], "label": "image/class/label",
                    "on_error": "skip", "features": {
                      "image/encoded": {"dtype": "uint8", "shape": [28, 28, 1], "scale": 0.00392156862745098},
                      "image/class/label": {"dtype": "int64"}}},
          "shuffle": true, "seed": 5, "shard_policy": "FILE", "num_parallel_calls": 2},
 "fit": {"epochs": 2, "batch_size": 16}}
JSON
jc submit "$DT_TEST_TMP/job.json" --watch >"$DT_TEST_TMP/watch.out" 2>&1 ||
  dt_fail "the TFRecord JPEG job failed: $(tail -5 "$DT_TEST_TMP/watch.out")"
cat "$DT_TEST_TMP/watch.out"
jc status 1 --json >"$DT_TEST_TMP/s1.json"
dt_assert_eq "$(dt_json_get state "$DT_TEST_TMP/s1.json")" "succeeded" "the job's state"
dt_assert_eq "$(dt_json_get examples "$DT_TEST_TMP/s1.json")" 96 "examples planned over both workers"
dt_assert_contains "$DT_TEST_TMP/tfr-w0.log" \
  "decoded the images of 48 of 96 records \(this worker's FILE shard: 2 of 4 files\)" "worker 0 decodes parts 0 and 2"
dt_assert_contains "$DT_TEST_TMP/tfr-w1.log" \
  "decoded the images of 47 of 96 records \(this worker's FILE shard: 2 of 4 files\)" "worker 1 decodes parts 1 and 3, less the cut record"
dt_assert_contains "$DT_TEST_TMP/tfr-w1.log" "skipped 1 records whose image did not decode.*part1.tfrecord: record 6 at byte" "worker 1 skips the cut record"
if grep -q "skipped .* records whose image" "$DT_TEST_TMP/tfr-w0.log"; then
  dt_fail "worker 0 decoded part1's cut record"
fi
for i in 0 1; do dt_stop_daemon "tfr-w$i" 10 || true; done
echo "ok: each worker decoded only its FILE shard's JPEG records"
