#!/usr/bin/env bash
# timeout: 300
# Fashion-MNIST written as PNG files in class folders (Keras's image_dataset_from_directory
# layout: train/<class>/*.png, test/<class>/*.png) trains the tutorial CNN on 2 daemons with FILE
# sharding to the accuracy the IDX run reaches (>= 0.88 after 3 epochs).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

FM=/usr/share/datasets/fashion-mnist
[[ -r $FM/train-images-idx3-ubyte.gz ]] || dt_skip "Fashion-MNIST is missing (make deps installs dataset-fashion-mnist)"
/usr/bin/python3 -c 'import PIL' 2>/dev/null || dt_skip "python3-pil is missing (make deps installs it)"
ROOT=$DT_TEST_TMP/images
t0=$(dt__now_ms)
/usr/bin/python3 - "$FM" "$ROOT" <<'PY' || dt_fail "writing the PNG folders"
import gzip, os, struct, sys
from PIL import Image
src, root = sys.argv[1], sys.argv[2]
names = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot"]
def idx(path):
    data = gzip.open(path).read()
    nd = data[3]
    dims = struct.unpack(">" + "I" * nd, data[4:4 + 4 * nd])
    return dims, data[4 + 4 * nd:]
for split, stem in (("train", "train"), ("test", "t10k")):
    (n, h, w), pix = idx(f"{src}/{stem}-images-idx3-ubyte.gz")
    _, labels = idx(f"{src}/{stem}-labels-idx1-ubyte.gz")
    for c in names:
        os.makedirs(f"{root}/{split}/{c}", exist_ok=True)
    for i in range(n):
        Image.frombytes("L", (w, h), pix[i * h * w:(i + 1) * h * w]).save(
            f"{root}/{split}/{names[labels[i]]}/{i:05d}.png")
PY
echo "wrote 70,000 PNG files in $(ms_since "$t0") ms"

JOBS_DATA=$ROOT
jobs_daemons 2 img
cp "$DT_SRC_DIR/config/models/fmnist_cnn.json" "$DT_TEST_TMP/model.json"
folder() { # SUBDIR
  echo "{\"format\": \"image_folder\", \"directory\": \"$1\", \"image_size\": [28, 28], \"color_mode\": \"grayscale\", \"label_mode\": \"int\", \"scale\": 0.00392156862745098}"
}
cat >"$DT_TEST_TMP/job.json" <<JSON
{"name": "fmnist-png", "model": "model.json",
 "compile": {"optimizer": {"class_name": "Adam", "config": {"learning_rate": 0.001}},
             "loss": {"class_name": "SparseCategoricalCrossentropy", "config": {"from_logits": true}},
             "metrics": ["accuracy"]},
 "data": {"train": $(folder train), "validation": $(folder test),
          "shuffle": true, "seed": 42, "shard_policy": "FILE"},
 "fit": {"epochs": 3, "batch_size": 64}}
JSON
t0=$(dt__now_ms)
jc submit "$DT_TEST_TMP/job.json" --watch >"$DT_TEST_TMP/watch.out" 2>&1 ||
  dt_fail "the PNG folder job failed: $(tail -5 "$DT_TEST_TMP/watch.out")"
cat "$DT_TEST_TMP/watch.out"
jc status 1 --json >"$DT_TEST_TMP/s1.json"
dt_assert_eq "$(dt_json_get examples "$DT_TEST_TMP/s1.json")" 60000 "training examples over both replicas"
acc=$(dt_json_get metrics.val_accuracy "$DT_TEST_TMP/s1.json")
echo "val_accuracy $acc after 3 epochs, $(ms_since "$t0") ms from submit"
/usr/bin/python3 -c 'import sys; sys.exit(float(sys.argv[1]) < 0.88)' "$acc" ||
  dt_fail "val_accuracy $acc < 0.88"
dt_assert_contains "$DT_TEST_TMP/img-w0.log" "rank 1 prepared \(30000 examples" "FILE sharding: half the files each"
# each worker decodes only its own half (submit-time validation decodes nothing), and all of
# the validation split, which every replica reads (DATA)
for w in 0 1; do
  dt_assert_contains "$DT_TEST_TMP/img-w$w.log" "decoded 30000 of 60000 files \(this worker's FILE shard\)" "worker $w decodes its shard"
  dt_assert_contains "$DT_TEST_TMP/img-w$w.log" "decoded 10000 of 10000 files in" "worker $w decodes the validation split"
  if grep -q "decoded 60000 of 60000" "$DT_TEST_TMP/img-w$w.log"; then dt_fail "worker $w decoded the whole training folder"; fi
done
echo "ok: Fashion-MNIST from PNG class folders"
