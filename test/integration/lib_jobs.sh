# shellcheck shell=bash
# lib_jobs.sh - helpers of the jobs_*.sh tests (source after lib.sh): a synthetic IDX data set
# a tiny CNN learns in seconds, job specs around it, and daemons with their roots.
#
#   jobs_data                       writes $JOBS_DATA/{train,val}-{images-idx3,labels-idx1}-ubyte
#   jobs_spec FILE [EPOCHS] [BATCH] [EXTRA_JSON]  a tiny job (EXTRA_JSON: ', "key": ...' appended)
#   jobs_daemons N TAG [DTRAIND_ARGS...]  N daemons on loopback (workers), formed; addresses in
#                                   JOBS_ADDRS, the chief's in JOBS_ADDR; state in $DT_TEST_TMP/TAG-wI
#   jc ARGS...                      dtrain --addr $JOBS_ADDR ARGS...
#   jobs_wait_state ID STATE [S]    wait until `status ID` says STATE
#   jobs_step ID                    the job's global step now
#   jobs_wait_step_past ID STEP [S] wait until the job is past global step STEP
#   ms_since T0_MS                  milliseconds since T0_MS (from dt__now_ms)
#   jobs_follows A.jsonl B.jsonl WHAT  two `submit --watch --json` runs of 2 epochs agree epoch by
#                                   epoch (loss, val_loss within 1e-4 relative: float32
#                                   reassociation), the worst printed
#   jobs_gpu_ns N                   daemons started by jobs_gpu_daemons see N GPUs: a mount
#                                   namespace each, whose /dev lists nvidia0..N-1 (root, unshare;
#                                   skips the test where that is impossible)
#   jobs_gpu_daemons N TAG VAR=VALUE...  jobs_daemons' N daemons in those namespaces, with the
#                                   environment given (DTRAIN_CUDA_LIB: the backend)
#   jobs_expect_weights ID RESTARTS REF RANKS WHAT  the job restarted RESTARTS times and every
#                                   one of its RANKS replicas ended with weights hash REF; its
#                                   status stays in $DT_TEST_TMP/sID.json

JOBS_DATA=$DT_TEST_TMP/data
JOBS_ADDRS=()
JOBS_ADDR=""

jobs_data() {
  mkdir -p "$JOBS_DATA"
  /usr/bin/python3 - "$JOBS_DATA" <<'PY'
import random, struct, sys
d = sys.argv[1]
def write(stem, n, seed):
    r = random.Random(seed)
    with open(f"{d}/{stem}-images-idx3-ubyte", "wb") as fi, open(f"{d}/{stem}-labels-idx1-ubyte", "wb") as fl:
        fi.write(struct.pack(">IIII", 0x803, n, 8, 8))
        fl.write(struct.pack(">II", 0x801, n))
        for _ in range(n):
            c = r.randrange(4)
            img = bytearray()
            for y in range(8):
                for x in range(8):
                    q = (y >= 4) * 2 + (x >= 4)
                    img.append(r.randrange(120) + (110 if q == c else 0))
            fi.write(img)
            fl.write(bytes([c]))
write("train", 512, 1)
write("val", 128, 2)
PY
}

jobs_spec() {
  local file=$1 epochs=${2:-2} batch=${3:-32} extra=${4:-}
  cat >"$file" <<JSON
{"name": "tiny",
 "model": {"class_name": "Sequential", "config": {"name": "tiny", "layers": [
   {"class_name": "InputLayer", "config": {"batch_input_shape": [null, 8, 8, 1], "name": "in"}},
   {"class_name": "Conv2D", "config": {"name": "conv", "filters": 4, "kernel_size": [3, 3], "activation": "relu"}},
   {"class_name": "Flatten", "config": {"name": "flat"}},
   {"class_name": "Dense", "config": {"name": "hidden", "units": 16, "activation": "relu"}},
   {"class_name": "Dense", "config": {"name": "out", "units": 4}}]}},
 "compile": {"optimizer": {"class_name": "Adam", "config": {"learning_rate": 0.01}},
             "loss": {"class_name": "SparseCategoricalCrossentropy", "config": {"from_logits": true}},
             "metrics": ["accuracy"]},
 "data": {"train": {"format": "idx", "images": "train-images-idx3-ubyte", "labels": "train-labels-idx1-ubyte",
                    "scale": 0.00392156862745098, "image_shape": [8, 8, 1]},
          "validation": {"format": "idx", "images": "val-images-idx3-ubyte", "labels": "val-labels-idx1-ubyte",
                         "scale": 0.00392156862745098, "image_shape": [8, 8, 1]},
          "shuffle": false, "seed": 7, "shard_policy": "DATA"},
 "fit": {"epochs": $epochs, "batch_size": $batch}$extra}
JSON
}

jobs_daemons() {
  local n=$1 tag=$2 i
  shift 2
  local -a ports
  mapfile -t ports < <(dt_free_ports "$n")
  JOBS_ADDRS=()
  for ((i = 0; i < n; i++)); do JOBS_ADDRS+=("127.0.0.1:${ports[$i]}"); done
  for ((i = 0; i < n; i++)); do
    jobs_start_one "$tag" "$i" "$@"
  done
  for ((i = 0; i < n; i++)); do
    dt_wait_file "$DT_TEST_TMP/$tag-w$i.ready" --timeout 30 || dt_fail "$tag: worker:$i never saw the cluster formed"
  done
  JOBS_ADDR=${JOBS_ADDRS[0]}
}

# jobs_start_one TAG I [ARGS...]: (re)start worker I of JOBS_ADDRS.
jobs_start_one() {
  local tag=$1 i=$2
  shift 2
  rm -f "$DT_TEST_TMP/$tag-w$i.ready"
  mkdir -p "$DT_TEST_TMP/$tag-w$i"
  dt_start_daemon "$tag-w$i" TF_CONFIG="$(dt_tfconfig_workers "$i" "${JOBS_ADDRS[@]}")" -- \
    --ready-file "$DT_TEST_TMP/$tag-w$i.ready" --state-dir "$DT_TEST_TMP/$tag-w$i" \
    --data-root "$JOBS_DATA" --rendezvous-timeout 30 "$@"
}

jc() { "$DT_BIN_DIR/dtrain" --addr "$JOBS_ADDR" "$@"; }

jobs_state() { jc status "$1" --json 2>/dev/null | dt_json_get state; }

jobs_wait_state() {
  local id=$1 want=$2 t=${3:-30}
  dt_wait_for jobs__is "$id" "$want" --timeout "$t" || {
    jc status "$id" >&2 || true
    dt_fail "job $id did not reach state $want within ${t}s"
  }
}
jobs__is() { [[ $(jobs_state "$1") == "$2" ]]; }

jobs_step() { jc status "$1" --json | dt_json_get global_step; }
jobs__past() { (($(jobs_step "$1") > $2)); }
jobs_wait_step_past() {
  dt_wait_for jobs__past "$1" "$2" --timeout "${3:-60}" || dt_fail "job $1 did not get past step $2"
}

ms_since() { echo $(($(dt__now_ms) - $1)); }

jobs_expect_weights() {
  local id=$1 restarts=$2 ref=$3 ranks=$4 what=$5 r f=$DT_TEST_TMP/s$1.json
  jc status "$id" --json >"$f"
  dt_assert_eq "$(dt_json_get restarts "$f")" "$restarts" "restarts of job $id"
  for ((r = 0; r < ranks; r++)); do
    dt_assert_eq "$(dt_json_get weights_hashes.$r "$f")" "$ref" "rank $r's final weights $what"
  done
}

JOBS_GPU_NS=""

jobs_gpu_ns() {
  local n=$1 i f dev=$DT_TEST_TMP/gpudev
  [[ $(id -u) == 0 ]] || dt_skip "needs root: each daemon gets a mount namespace of its own"
  command -v unshare >/dev/null || dt_skip "no unshare (util-linux)"
  unshare -m --propagation private true 2>/dev/null || dt_skip "no mount namespaces here"
  mkdir -p "$dev"
  for f in null zero random urandom full nvidiactl; do : >"$dev/$f"; done
  for ((i = 0; i < n; i++)); do : >"$dev/nvidia$i"; done
  JOBS_GPU_NS=$DT_TEST_TMP/gpudev.sh
  cat >"$JOBS_GPU_NS" <<'SH'
#!/bin/sh
# gpudev.sh DEV CMD ARGS...: CMD in a private mount namespace with DEV as its /dev (the devices
# a process needs bound from the real one; DEV's nvidiaN are what the daemon counts as GPUs).
dev=$1
shift
exec unshare -m --propagation private sh -c '
  dev=$1; shift
  for f in null zero random urandom full; do mount --bind "/dev/$f" "$dev/$f" || exit 97; done
  mount --rbind "$dev" /dev || exit 98
  exec "$@"' sh "$dev" "$@"
SH
  chmod +x "$JOBS_GPU_NS"
}

# jobs_gpu_start_one TAG I VAR=VALUE...: (re)start worker I of JOBS_ADDRS in its namespace.
jobs_gpu_start_one() {
  local tag=$1 i=$2
  shift 2
  [[ -n $JOBS_GPU_NS ]] || dt_fail "jobs_gpu_start_one before jobs_gpu_ns"
  rm -f "$DT_TEST_TMP/$tag-w$i.ready"
  mkdir -p "$DT_TEST_TMP/$tag-w$i"
  dt_bg "$tag-w$i" env TF_CONFIG="$(dt_tfconfig_workers "$i" "${JOBS_ADDRS[@]}")" "$@" \
    "$JOBS_GPU_NS" "$DT_TEST_TMP/gpudev" "$DT_BIN_DIR/dtraind" \
    --ready-file "$DT_TEST_TMP/$tag-w$i.ready" --state-dir "$DT_TEST_TMP/$tag-w$i" \
    --data-root "$JOBS_DATA" --rendezvous-timeout 30
}

jobs_gpu_daemons() {
  local n=$1 tag=$2 i
  shift 2
  local -a ports
  mapfile -t ports < <(dt_free_ports "$n")
  JOBS_ADDRS=()
  for ((i = 0; i < n; i++)); do JOBS_ADDRS+=("127.0.0.1:${ports[$i]}"); done
  for ((i = 0; i < n; i++)); do jobs_gpu_start_one "$tag" "$i" "$@"; done
  for ((i = 0; i < n; i++)); do
    dt_wait_file "$DT_TEST_TMP/$tag-w$i.ready" --timeout 30 ||
      dt_fail "$tag: worker:$i never saw the cluster formed: $(tail -3 "$DT_TEST_TMP/$tag-w$i.log")"
  done
  JOBS_ADDR=${JOBS_ADDRS[0]}
}

jobs_follows() {
  local py=/usr/bin/python3
  [[ -x $py ]] || py=python3
  "$py" - "$1" "$2" "$3" <<'PY' || dt_fail "$3"
import json, sys
def ends(p):
    return [e["metrics"] for e in map(json.loads, open(p)) if e["kind"] == "epoch_end"]
a, b = ends(sys.argv[1]), ends(sys.argv[2])
assert len(a) == len(b) == 2, (a, b)
worst = max(abs(x[k] - y[k]) / abs(y[k]) for x, y in zip(a, b) for k in ("loss", "val_loss"))
print("%s: epoch losses within %.2g (relative); losses %s, val_loss %s"
      % (sys.argv[3], worst, [round(x["loss"], 5) for x in a], [round(x["val_loss"], 5) for x in a]))
assert worst <= 1e-4, (a, b)
assert a[-1]["loss"] < a[0]["loss"], "the loss did not go down"
PY
}
