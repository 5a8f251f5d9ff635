# shellcheck shell=bash
# shellcheck disable=SC2034  # ours and torch are read by the sourcing script
# vs-torch-lib.sh - what text-vs-torch.sh and mobilenet-vs-torch.sh share: ROUNDS alternating
# rounds of `dtrain bench train` and the caller's torch_bench (a function printing one JSON line
# with samples_per_s, step_s, torch, params), the best round of each side kept, and the report.
# The caller sets PY, BATCH, STEPS and ROUNDS.

# The JSON line with the higher samples_per_s.
vs_torch_best() {
  $PY -c 'import json,sys; a=[json.loads(l) for l in sys.argv[1:] if l]; print(json.dumps(max(a, key=lambda r: r["samples_per_s"])))' "$@"
}

# vs_torch_rounds MODEL.json WARMUP: sets ours and torch to each side's best round.
vs_torch_rounds() {
  local model=$1 warmup=$2 r o t
  ours='' torch=''
  for ((r = 0; r < ROUNDS; r++)); do
    o=$(bin/dtrain bench train --model "$model" --batch "$BATCH" --threads 1 \
      --steps "$STEPS" --warmup "$warmup" --json)
    t=$(torch_bench)
    ours=$(vs_torch_best "$ours" "$o")
    torch=$(vs_torch_best "$torch" "$t")
  done
}

# vs_torch_report TITLE [NOTE]: both sides, the ratio and the BLAS; NOTE follows PyTorch's line.
vs_torch_report() {
  $PY - "$ours" "$torch" "$1" "${2:-}" <<'PYEOF'
import json, sys
o, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(sys.argv[3])
print("dtrain  : %8.2f samples/s  %.1f ms/step  (GEMMs %.1f ms = %.0f%% of the step)" % (
    o["samples_per_s"], o["step_s"] * 1e3, o["gemm_s"] * 1e3, 100 * o["gemm_fraction"]))
print("pytorch : %8.2f samples/s  %.1f ms/step  (torch %s, %d parameters%s)" % (
    t["samples_per_s"], t["step_s"] * 1e3, t["torch"], t["params"],
    "; " + sys.argv[4] if sys.argv[4] else ""))
print("ratio   : %.2fx" % (o["samples_per_s"] / t["samples_per_s"]))
print("blas    : %s" % o["blas"])
PYEOF
}
