#!/usr/bin/env bash
# timeout: 120
# scripts/bench/text-vs-torch.sh at its smallest (vocabulary 500, 16-wide embeddings, LSTM(8),
# 12 tokens, batch 8, 2 timed steps, one round): both sides run the Embedding + LSTM model and
# the script prints dtrain's and PyTorch's samples/s, PyTorch's parameter count (Keras's
# 500*16 + 4*8*(16+8+1) + 8*2+2 = 8,818, plus PyTorch's second LSTM bias of 4*8) and the ratio.
# No figure is asserted beyond being positive: the machine is shared.
source "$(dirname "$0")/lib.sh"
/usr/bin/python3 -c 'import torch' 2>/dev/null || dt_skip "/usr/bin/python3 has no torch"
ROUNDS=1 bash "$DT_SRC_DIR/scripts/bench/text-vs-torch.sh" 500 16 8 12 8 2 >"$DT_TEST_TMP/out" 2>&1 ||
  { cat "$DT_TEST_TMP/out"; dt_fail "text-vs-torch.sh failed"; }
cat "$DT_TEST_TMP/out"
grep -qF "Embedding(500, 16) -> LSTM(8) -> Dense(2), 12 tokens a sample, batch 8, 1 thread" \
  "$DT_TEST_TMP/out" || dt_fail "the title"
grep -qF "8850 parameters" "$DT_TEST_TMP/out" || dt_fail "PyTorch's parameter count"
/usr/bin/python3 - "$DT_TEST_TMP/out" <<'PY' || dt_fail "the figures"
import re, sys
t = open(sys.argv[1]).read()
ours = float(re.search(r"dtrain  : +([0-9.]+) samples/s", t).group(1))
torch = float(re.search(r"pytorch : +([0-9.]+) samples/s", t).group(1))
ratio = float(re.search(r"ratio   : ([0-9.]+)x", t).group(1))
assert ours > 0 and torch > 0, (ours, torch)
assert abs(ratio - ours / torch) <= 0.01 * ratio + 0.01, (ratio, ours, torch)
PY
echo "ok: the text benchmark runs both sides and prints their ratio"
