#!/usr/bin/env bash
# timeout: 150
# scripts/bench/mobilenet-fed.sh at its smallest: one daemon trains MobileNetV2 96x96 on 96
# PIL-written photos (60-140 px, resized to 96x96 by the data spec), batch 32, 2 epochs, and the
# script reads the daemon's decode line and step-phase lines. Checked: every photo decoded on the
# 2 decode threads asked for, one row per epoch with the 2 counted steps of 3 (the first step of
# an epoch is not counted), and the figures add up (data + forward+backward within the step, the
# fraction the quotient). No time is asserted: the machine is shared.
source "$(dirname "$0")/lib.sh"
/usr/bin/python3 -c 'import PIL, numpy' 2>/dev/null || dt_skip "/usr/bin/python3 has no PIL/numpy"
MIN_PX=60 MAX_PX=140 THREADS=1 DECODE_THREADS=2 \
  bash "$DT_SRC_DIR/scripts/bench/mobilenet-fed.sh" 96 32 2 >"$DT_TEST_TMP/out" 2>&1 ||
  { cat "$DT_TEST_TMP/out"; dt_fail "mobilenet-fed.sh failed"; }
cat "$DT_TEST_TMP/out"
grep -qF "MobileNetV2 96x96x3, 2 classes, batch 32: 96 photos" "$DT_TEST_TMP/out" || dt_fail "the title"
/usr/bin/python3 - "$DT_TEST_TMP/out" <<'PY' || dt_fail "the figures"
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert r["photos"] == 96 and r["batch"] == 32 and r["epochs"] == 2, r
assert r["decode_threads"] == 2 and r["decode_s"] >= 0, r
rows = r["epochs_phase"]
assert [e["epoch"] for e in rows] == [1, 2], rows
for e in rows:
    assert e["steps"] == 2, e
    assert e["step_ms"] > 0 and e["compute_ms"] > 0 and e["data_ms"] >= 0, e
    assert e["data_ms"] + e["compute_ms"] <= e["step_ms"] + 0.02, e
    assert abs(e["data_fraction"] - e["data_ms"] / e["step_ms"]) < 1e-9, e
PY
echo "ok: the MobileNetV2 feeding benchmark trains and reads the step phases"
