#!/usr/bin/env bash
# keras-vs-torch.sh - the models Keras users bring beyond image CNNs, in one run: training
# throughput on 1 thread against Debian's PyTorch of an Embedding + LSTM text classifier
# (text-vs-torch.sh) and MobileNetV2 at 96x96 (mobilenet-vs-torch.sh). Prints each script's
# lines, then a table of the ratios (the aim: 2x or more). ROUNDS (default 3) is passed on: each
# side runs that many alternating rounds and keeps its best.
set -euo pipefail
cd "$(dirname "$0")/../.."
export ROUNDS=${ROUNDS:-3}
[[ -x bin/dtrain ]] || make -j2 >/dev/null
rows=()
for b in text-vs-torch mobilenet-vs-torch; do
  echo "== $b"
  out=$(bash "scripts/bench/$b.sh")
  echo "$out"
  ratio=$(grep -E '^ratio' <<<"$out" | head -1 | sed -E 's/^ratio *: *//')
  rows+=("$b ${ratio:-?}")
done
echo
echo "| benchmark (1 thread) | dtrain / PyTorch |"
echo "|---|---|"
for r in "${rows[@]}"; do
  echo "| ${r% *} | ${r##* } |"
done
