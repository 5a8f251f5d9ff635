#!/usr/bin/env bash
# timeout: 180
# tf.keras.applications.MobileNetV2(input_shape=(96, 96, 3), weights=None, classes=2), as its
# to_json() writes it (test/ref/mobilenet_v2_json.py), trains as a job on 96x96 RGB PNG files in
# class folders (written here: horizontal against vertical stripes under noise): the training loss
# falls on 2 daemons. BatchNormalization normalises each replica's batch by its own statistics
# (as MirroredStrategy does without SyncBatchNormalization), so 2 replicas of 8 examples do not
# compute what 1 replica of 16 does; 2 daemons x 1 replica must then compute exactly what 1 daemon
# x 2 CPU replicas does (the same shards, the same per-replica statistics): the same epoch
# losses and the same final weights hash. 1 daemon x 1 replica is shown beside them.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

/usr/bin/python3 - "$JOBS_DATA" <<'PY' || dt_fail "writing the PNG folders"
import os, random, struct, sys, zlib
root, S = sys.argv[1], 96
def png(path, pix):  # 8-bit RGB, filter 0 on every row (Python's zlib; PIL may be absent)
    raw = bytearray()
    for y in range(S):
        raw.append(0)
        for r, g, b in pix[y * S:(y + 1) * S]:
            raw += bytes((r, g, b))
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", S, S, 8, 2, 0, 0, 0))
    open(path, "wb").write(out + chunk(b"IDAT", zlib.compress(bytes(raw))) + chunk(b"IEND", b""))
def write(split, n, seed):
    rnd = random.Random(seed)
    for c in ("horizontal", "vertical"):
        os.makedirs(f"{root}/{split}/{c}", exist_ok=True)
    for i in range(n):
        c = i % 2
        period, phase = rnd.randrange(8, 20), rnd.randrange(20)
        tint = [rnd.randrange(60, 200) for _ in range(3)]
        pix = []
        for y in range(S):
            for x in range(S):
                on = (((y if c == 0 else x) + phase) // (period // 2)) % 2
                pix.append(tuple(max(0, min(255, t * on + rnd.randrange(50))) for t in tint))
        png(f"{root}/{split}/{('horizontal', 'vertical')[c]}/{i:03d}.png", pix)
write("train", 64, 1)
write("val", 16, 2)
PY
/usr/bin/python3 "$DT_SRC_DIR/test/ref/mobilenet_v2_json.py" 96 2 >"$DT_TEST_TMP/mobilenet_v2.json" ||
  dt_fail "writing the MobileNetV2 JSON"

spec() { # FILE [EXTRA_JSON]
  local folder='"image_size": [96, 96], "color_mode": "rgb", "label_mode": "int", "scale": 0.00392156862745098'
  cat >"$1" <<JSON
{"name": "mobilenet_v2", "model": "mobilenet_v2.json",
 "compile": {"optimizer": {"class_name": "Adam", "config": {"learning_rate": 0.001}},
             "loss": "sparse_categorical_crossentropy", "metrics": ["accuracy"]},
 "data": {"train": {"format": "image_folder", "directory": "train", $folder},
          "validation": {"format": "image_folder", "directory": "val", $folder},
          "shuffle": false, "seed": 7, "shard_policy": "DATA"},
 "fit": {"epochs": 3, "batch_size": 16}${2:-}}
JSON
}
spec "$DT_TEST_TMP/flat.json"
spec "$DT_TEST_TMP/two_cpus.json" ', "strategy": {"devices": ["/cpu:0", "/cpu:1"]}'

run() { # TAG DAEMONS JOB: the job's events in TAG.jsonl, its status in TAG.json
  local tag=$1 n=$2 job=$3 i t0
  jobs_daemons "$n" "$tag"
  t0=$(dt__now_ms)
  jc submit "$job" --watch --json >"$DT_TEST_TMP/$tag.jsonl" ||
    dt_fail "MobileNetV2 ($tag) did not succeed: $(tail -1 "$DT_TEST_TMP/$tag.jsonl")"
  echo "$tag: $(ms_since "$t0") ms from submit"
  jc status 1 --json >"$DT_TEST_TMP/$tag.json"
  dt_assert_eq "$(dt_json_get examples "$DT_TEST_TMP/$tag.json")" 64 "$tag: examples"
  for ((i = 0; i < n; i++)); do dt_stop_daemon "$tag-w$i" 10 || true; done
}
run two 2 "$DT_TEST_TMP/flat.json"
run cpus 1 "$DT_TEST_TMP/two_cpus.json"
run one 1 "$DT_TEST_TMP/flat.json"

h=$(dt_json_get weights_hashes.0 "$DT_TEST_TMP/two.json")
[[ -n $h ]] || dt_fail "the 2-daemon run reported no weights hash"
dt_assert_eq "$(dt_json_get weights_hashes.0 "$DT_TEST_TMP/cpus.json")" "$h" \
  "2 daemons x 1 replica against 1 daemon x 2 replicas: final weights hash"
/usr/bin/python3 - "$DT_TEST_TMP" <<'PY' || dt_fail "the MobileNetV2 runs"
import json, sys
d = sys.argv[1]
def ends(tag):
    return [e["metrics"] for e in map(json.loads, open(f"{d}/{tag}.jsonl")) if e["kind"] == "epoch_end"]
two, cpus, one = ends("two"), ends("cpus"), ends("one")
assert len(two) == len(cpus) == len(one) == 3, (two, cpus, one)
for k, (a, b, c) in enumerate(zip(two, cpus, one)):
    print("epoch %d: loss 2x1 %.6f, 1x2 %.6f, 1x1 %.6f; accuracy 2x1 %.4f, 1x1 %.4f" %
          (k + 1, a["loss"], b["loss"], c["loss"], a["accuracy"], c["accuracy"]))
    assert a["loss"] == b["loss"], ("2x1 and 1x2 differ", k, a, b)
assert two[-1]["loss"] < two[0]["loss"], ("the loss did not fall on 2 daemons", two)
assert one[-1]["loss"] < one[0]["loss"], ("the loss did not fall on 1 daemon", one)
PY
echo "ok: MobileNetV2 96x96 trains as a job; 2 daemons compute what 1 daemon x 2 replicas does"
