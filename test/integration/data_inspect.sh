#!/usr/bin/env bash
# timeout: 60
# dtrain data inspect on the real Fashion-MNIST: --json keys (DESIGN.md), the label histogram,
# the sharding plan, --help, and exit 2 with a message naming the file on bad input.
set -euo pipefail
F=/usr/share/datasets/fashion-mnist
DTRAIN=$DT_BIN_DIR/dtrain
T=${DT_TEST_TMP:-$(mktemp -d)}
PY=/usr/bin/python3

# Images, written here with PIL: an image folder (2 classes, JPEG + PNG + RGBA/L/P modes, a text
# file and a truncated JPEG named .jpg) and a TFRecord of tf.train.Examples with JPEG bytes.
if $PY -c 'import PIL, numpy' 2>/dev/null; then
  $PY "${DT_SRC_DIR:-.}/scripts/bench/make_photos.py" "$T/img" 30 60 300 3 --png 4 --bad 2 >/dev/null
  $PY - "$T" <<'PYEOF'
import io, struct, sys
import numpy as np
from PIL import Image
t = sys.argv[1]
r = np.random.RandomState(0)
Image.fromarray(r.randint(0, 255, (70, 50, 4), np.uint8), "RGBA").save(f"{t}/img/class_0/rgba.png")
Image.fromarray(r.randint(0, 255, (600, 40), np.uint8), "L").save(f"{t}/img/class_1/gray.jpg")
Image.fromarray(r.randint(0, 255, (33, 5000), np.uint8), "L").convert("P").save(f"{t}/img/class_1/pal.png")
big = io.BytesIO()
Image.fromarray(r.randint(0, 255, (300, 300, 3), np.uint8)).save(big, "JPEG", quality=80)
open(f"{t}/img/class_1/cut.jpg", "wb").write(big.getvalue()[:5000])  # header intact, data cut
open(f"{t}/img/class_0/notes.txt", "w").write("Keras skips this\n")
# TFRecord: 5 records, image/encoded JPEG (sizes 20x30 .. 60x70), image/class/label
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
def example(feats):  # {key: Feature bytes}
    ents = b"".join(ld(0x0A, ld(0x0A, k.encode()) + ld(0x12, v)) for k, v in feats.items())
    return ld(0x0A, ents)
with open(f"{t}/img.tfrecord", "wb") as f:
    for i in range(5):
        b = io.BytesIO()
        Image.fromarray(r.randint(0, 255, (20 + 10 * i, 30 + 10 * i, 3), np.uint8)).save(b, "JPEG")
        jpg = b.getvalue() if i != 3 else b.getvalue()[:200]  # record 3: cut inside the scan
        ex = example({"image/encoded": ld(0x0A, ld(0x0A, jpg)),
                      "image/class/label": ld(0x1A, ld(0x0A, varint(i % 2)))})
        hdr = struct.pack("<Q", len(ex))
        f.write(hdr + struct.pack("<I", mask(crc32c(hdr))) + ex + struct.pack("<I", mask(crc32c(ex))))
PYEOF
  "$DTRAIN" data inspect "$T/img" --json --threads 3 >"$T/img.json"
  "$DTRAIN" data inspect "$T/img" --json --threads 1 >"$T/img1.json"
  cmp -s "$T/img.json" "$T/img1.json" || { echo "inspect depends on --threads" >&2; exit 1; }
  "$DTRAIN" data inspect "$T/img.tfrecord" --json --label image/class/label >"$T/tfr.json"
  $PY - "$T/img.json" "$T/tfr.json" <<'PYEOF'
import json, sys
f = json.load(open(sys.argv[1]))["files"][0]
assert f["format"] == "image_folder" and f["records"] == 36, f["records"]
assert f["classes"] == {"class_0": 17, "class_1": 19}, f["classes"]
im = f["images"]
assert im["count"] == 36 and im["formats"] == {"JPEG": 29, "PNG": 6, "other": 1}, im["formats"]
assert im["modes"] == {"RGB": 32, "RGBA": 1, "L": 1, "P": 1}, im["modes"]
assert im["unreadable"] == 3, im
bad = im["unreadable_files"]
assert any("bad_00000.jpg: not a JPEG or PNG" in b for b in bad), bad
assert any("cut.jpg: corrupt JPEG" in b for b in bad), bad
assert im["height"]["min"] == 33 and im["height"]["max"] == 600, im["height"]
assert im["width"]["min"] == 40 and im["width"]["max"] == 5000, im["width"]
assert im["width"]["histogram"]["4096+"] == 1 and im["height"]["histogram"]["512-1023"] == 1
assert sum(im["height"]["histogram"].values()) == 35  # every readable header
t = json.load(open(sys.argv[2]))["files"][0]
assert t["format"] == "tfrecord" and t["records"] == 5, t
assert t["features"]["image/encoded"]["dtype"] == "bytes(jpeg)", t["features"]
assert t["label_histogram"] == [3, 2], t
ti = t["images"]
assert ti["count"] == 5 and ti["formats"]["JPEG"] == 5 and ti["unreadable"] == 1, ti
assert ti["modes"] == {"RGB": 4}, ti
assert "record 3: image/encoded" in ti["unreadable_files"][0], ti
assert (ti["height"]["min"], ti["height"]["median"], ti["height"]["max"]) == (20, 30, 60), ti  # record 3 has no header left: 4 sized
assert (ti["width"]["min"], ti["width"]["max"]) == (30, 70), ti
PYEOF
  "$DTRAIN" data inspect "$T/img" --replicas 2 --policy FILE --batch 4 >"$T/img.txt"
  grep -q "classes  2" "$T/img.txt" && grep -q "unreadable: .*cut.jpg" "$T/img.txt" &&
    grep -q "replica 1 *18 records" "$T/img.txt" || { cat "$T/img.txt"; exit 1; }
  set +e
  "$DTRAIN" data inspect "$T/img" --threads 0 2>"$T/err"; rc=$?
  set -e
  [[ $rc == 2 ]] && grep -q -- "--threads must be" "$T/err"
  echo "images: ok"
else
  echo "no PIL: the image part did not run"
fi

[[ -r $F/train-images-idx3-ubyte.gz ]] || { echo "SKIP: dataset-fashion-mnist not installed"; exit 7; }

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
