#!/usr/bin/env bash
# timeout: 240
# Two daemons sharing one GPU, the host ring between them: the tutorial CNN
# (config/models/fmnist_cnn.json, 28x28 images, 10 classes) trained on ["/gpu:0"] by 2 daemons
# follows the same job on 1 daemon epoch by epoch (the same steps: 32 + 32 examples summed where
# one replica sums 64, so the same losses up to float32 reassociation), and both daemons end with
# one weights hash. On a GPU machine the daemons use the GPU itself (scripts/gpu/run.sh --exec
# .gpu/build/dt_test jobs_gpu_two_daemons); elsewhere the CUDA backend's own code on the host
# emulator, each daemon in a mount namespace whose /dev lists one GPU.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/lib_jobs.sh"

# Debian's python3 here; the GPU machine's may live elsewhere (the data needs no module)
PY=/usr/bin/python3
[[ -x $PY ]] || PY=python3
native=0
if [[ -e /dev/nvidia0 && -z ${DTRAIN_CUDA_LIB:-} ]] && nvidia-smi -L >/dev/null 2>&1; then
  native=1
else
  emu=$DT_SRC_DIR/build/libdtrain-cudaemu.so
  [[ -f $emu ]] || dt_skip "no GPU and no $emu (the build makes it where python3 and g++ exist)"
  jobs_gpu_ns 1
fi

# 28x28 images, 10 classes: class c brightens row band c
"$PY" - "$JOBS_DATA" <<'PY'
import os, random, struct, sys
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
def write(stem, n, seed):
    r = random.Random(seed)
    with open(f"{d}/{stem}-images-idx3-ubyte", "wb") as fi, open(f"{d}/{stem}-labels-idx1-ubyte", "wb") as fl:
        fi.write(struct.pack(">IIII", 0x803, n, 28, 28))
        fl.write(struct.pack(">II", 0x801, n))
        for _ in range(n):
            c = r.randrange(10)
            fi.write(bytes(r.randrange(100) + (120 if y // 3 == c else 0) for y in range(28) for x in range(28)))
            fl.write(bytes([c]))
write("train", 1024, 1)
write("val", 256, 2)
PY
"$PY" - "$DT_SRC_DIR/config/models/fmnist_cnn.json" "$DT_TEST_TMP/cnn.json" <<'PY'
import json, sys
model = json.load(open(sys.argv[1]))
src = lambda stem: {"format": "idx", "images": f"{stem}-images-idx3-ubyte",
                    "labels": f"{stem}-labels-idx1-ubyte", "scale": 1 / 255,
                    "image_shape": [28, 28, 1]}
spec = {"name": "tutorial-cnn", "model": model,
        "compile": {"optimizer": {"class_name": "Adam", "config": {"learning_rate": 0.001}},
                    "loss": {"class_name": "SparseCategoricalCrossentropy",
                             "config": {"from_logits": True}},
                    "metrics": ["accuracy"]},
        "data": {"train": src("train"), "validation": src("val"), "shuffle": False, "seed": 7,
                 "shard_policy": "DATA"},
        "fit": {"epochs": 2, "batch_size": 64},
        "strategy": {"devices": ["/gpu:0"]}}
json.dump(spec, open(sys.argv[2], "w"))
PY

# daemons N TAG: N daemons on the GPU (the real one, or the emulated one in their namespaces)
daemons() {
  if ((native)); then
    jobs_daemons "$1" "$2"
  else
    jobs_gpu_daemons "$1" "$2" DTRAIN_CUDA_LIB="$emu" DTRAIN_EMU_GPUS=1
  fi
}

daemons 1 one
jc submit "$DT_TEST_TMP/cnn.json" --watch --json >"$DT_TEST_TMP/one.jsonl" ||
  dt_fail "the 1-daemon GPU job did not succeed: $(tail -1 "$DT_TEST_TMP/one.jsonl")"
dt_stop_daemon one-w0

daemons 2 two
jc submit "$DT_TEST_TMP/cnn.json" --watch --json >"$DT_TEST_TMP/two.jsonl" ||
  dt_fail "the 2-daemon GPU job did not succeed: $(tail -1 "$DT_TEST_TMP/two.jsonl")"
jc status 1 --json >"$DT_TEST_TMP/two.status"
h0=$(dt_json_get weights_hashes.0 "$DT_TEST_TMP/two.status")
[[ -n $h0 ]] || dt_fail "the 2-daemon job reported no weights hash"
dt_assert_eq "$(dt_json_get weights_hashes.1 "$DT_TEST_TMP/two.status")" "$h0" "the two daemons' hashes"
for i in 0 1; do
  dt_assert_contains "$DT_TEST_TMP/two-w$i.log" "the training set is on the device" \
    "worker:$i trained on the GPU (its feed keeps the data there)"
done
dt_stop_daemon two-w1
dt_stop_daemon two-w0

where=$( ((native)) && echo "the GPU" || echo "the emulated GPU")
jobs_follows "$DT_TEST_TMP/two.jsonl" "$DT_TEST_TMP/one.jsonl" "tutorial CNN on $where: 2 daemons against 1"
