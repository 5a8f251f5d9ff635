#!/usr/bin/env bash
# timeout: 120
# dtrain bench data on an image folder written here with PIL (job spec, data spec and split
# forms; relative paths from the spec's folder; --threads; a bad file skipped), its refusals,
# and scripts/bench/images-vs-torch.sh at its smallest (24 photos, one pass, --json).
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
"$PY" -c 'import PIL, numpy' 2>/dev/null || dt_skip "no PIL in $PY (apt-get install python3-pil)"
D=$DT_BIN_DIR/dtrain
T=$DT_TEST_TMP
"$PY" "$DT_SRC_DIR/scripts/bench/make_photos.py" "$T/ph" 40 60 120 2 --png 2 --bad 1 >/dev/null
cat >"$T/job.json" <<'JSON'
{"model": {}, "data": {"train": {"format": "image_folder", "directory": "ph", "image_size": [32, 24],
                                 "on_error": "skip"}, "num_parallel_calls": 3}}
JSON
"$D" bench data "$T/job.json" --json --batch 8 >"$T/a.json" 2>"$T/a.err" || dt_fail "bench data failed: $(cat "$T/a.err")"
"$D" bench data "$T/job.json" --json --threads 1 --repeat 2 >"$T/b.json" 2>/dev/null
"$D" bench data "{\"train\": {\"format\": \"image_folder\", \"directory\": \"$T/ph\", \"on_error\": \"skip\"}}" \
  --json >"$T/c.json" 2>/dev/null
"$D" bench data "{\"format\": \"image_folder\", \"directory\": \"$T/ph\", \"on_error\": \"skip\", \"image_size\": [8, 8]}" \
  >"$T/d.txt" 2>/dev/null
"$PY" - "$T" <<'PYEOF'
import json, sys
t = sys.argv[1]
a, b, c = (json.load(open(f"{t}/{x}.json")) for x in "abc")
assert a["format"] == "image_folder" and a["images"] == 40, a   # the bad file skipped
assert a["image_size"] == [32, 24] and a["threads"] == 3 and a["batch"] == 8, a
assert b["threads"] == 1 and b["images"] == 40, b
assert c["image_size"] == [256, 256] and c["images"] == 40, c     # Keras's default size
for r in (a, b, c):
    assert r["load_s"] > 0 and r["batch_s"] > 0, r
    assert r["images_per_s"] > 0
    # one pass is decode then batch: slower than either alone
    assert r["decode_images_per_s"] >= r["images_per_s"] <= r["batch_images_per_s"], r
    assert abs(r["images_per_s"] - r["images"] / (r["load_s"] + r["batch_s"])) < 1e-6 * r["images_per_s"]
PYEOF
dt_assert_contains "$T/d.txt" "image_folder, 40 examples at 8x8x3" "bench data text"
dt_assert_contains "$T/d.txt" "one pass" "bench data text"

# refusals: exit 2 naming the JSON path or the option
set +e
"$D" bench data "{\"data\": {\"train\": {\"format\": \"image_folder\", \"directory\": \"$T/ph\", \"imagesize\": [2, 2]}}}" 2>"$T/e1"; r1=$?
"$D" bench data "{\"data\": {\"train\": {\"format\": \"image_folder\", \"directory\": \"$T/ph\"}, \"num_parallel_calls\": 0}}" 2>"$T/e2"; r2=$?
"$D" bench data "$T/job.json" --threads 0 2>"$T/e3"; r3=$?
"$D" bench data "$T/none.json" 2>"$T/e4"; r4=$?
"$D" bench data 2>/dev/null; r5=$?
set -e
[[ "$r1 $r2 $r3 $r4 $r5" == "2 2 2 2 2" ]] || dt_fail "exit codes $r1 $r2 $r3 $r4 $r5, want 2s"
dt_assert_contains "$T/e1" 'data.train.imagesize: unknown key' "unknown key"
dt_assert_contains "$T/e2" 'data.num_parallel_calls: expected a number of threads' "bad num_parallel_calls"
dt_assert_contains "$T/e3" '--threads must be 1..256' "--threads 0"
dt_assert_contains "$T/e4" 'none.json' "missing spec"

# the comparison script at its smallest (torch needed)
if "$PY" -c 'import torch' 2>/dev/null; then
  "$DT_SRC_DIR/scripts/bench/images-vs-torch.sh" --images 24 --min 40 --max 80 --threads 1 \
    --repeat 1 --batch 8 --dir "$T/ivt" --json >"$T/ivt.json" || dt_fail "images-vs-torch.sh failed"
  "$PY" - "$T/ivt.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["images"] == 24 and r["threads"] == 1 and r["batch"] == 8, r
assert r["dtrain_images_per_s"] > 0 and r["torch_images_per_s"] > 0, r
assert abs(r["ratio"] - r["dtrain_images_per_s"] / r["torch_images_per_s"]) < 1e-9, r
assert "DataLoader" in r["torch_pipeline"], r
PYEOF
  set +e
  "$DT_SRC_DIR/scripts/bench/images-vs-torch.sh" --images 0 2>"$T/e6"; r6=$?
  set -e
  [[ $r6 == 2 ]] || dt_fail "images-vs-torch.sh --images 0: exit $r6"
fi
echo ok
