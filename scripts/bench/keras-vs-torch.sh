#!/usr/bin/env bash
# keras-vs-torch.sh - the models Keras users bring beyond image CNNs, in one run: training
# throughput on 1 thread against Debian's PyTorch of an Embedding + LSTM text classifier
# (text-vs-torch.sh) and MobileNetV2 at 96x96 (mobilenet-vs-torch.sh). Prints each script's
# lines, then a table of the ratios (the aim: 2x or more). ROUNDS (default 3) is passed on: each
# side runs that many alternating rounds and keeps its best.
# When the environment pins OpenBLAS's kernels (OPENBLAS_CORETYPE, as some CI machines do to get
# the same GEMM bits on every host), each benchmark also runs without the pin - both sides, in
# the same environment - so the table shows the kernels OpenBLAS picks for this CPU by itself
# beside the pinned ones (the BLAS line under each result names the core that ran).
set -euo pipefail
cd "$(dirname "$0")/../.."
export ROUNDS=${ROUNDS:-3}
[[ -x bin/dtrain ]] || make -j2 >/dev/null
pin=${OPENBLAS_CORETYPE:-}
rows=()
for b in text-vs-torch mobilenet-vs-torch; do
  for mode in env ${pin:+unpinned}; do
    if [[ $mode == env ]]; then
      echo "== $b${pin:+ (OPENBLAS_CORETYPE=$pin, as set)}"
      out=$(bash "scripts/bench/$b.sh")
    else
      echo "== $b (OPENBLAS_CORETYPE unset: OpenBLAS picks its kernels for this CPU)"
      out=$(env -u OPENBLAS_CORETYPE bash "scripts/bench/$b.sh")
    fi
    echo "$out"
    ratio=$(grep -E '^ratio' <<<"$out" | head -1 | sed -E 's/^ratio *: *//')
    core=$(grep -E '^blas' <<<"$out" | head -1 | sed -E 's/.*core ([A-Za-z0-9]+).*/\1/')
    rows+=("$b|${core:-?}|${ratio:-?}")
  done
done
echo
echo "| benchmark (1 thread) | OpenBLAS core | dtrain / PyTorch |"
echo "|---|---|---|"
for r in "${rows[@]}"; do
  IFS='|' read -r name core ratio <<<"$r"
  echo "| $name | $core | $ratio |"
done
