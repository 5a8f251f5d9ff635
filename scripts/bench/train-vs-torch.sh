#!/usr/bin/env bash
# train-vs-torch.sh [MODEL.json] [BATCH] [THREADS] [STEPS] - training throughput of dtrain against
# Debian's PyTorch (/usr/bin/python3, python3-torch) on the same model, batch and thread count,
# in the same run. Prints both figures, their ratio and the OpenBLAS kernel that ran.
# The machine is shared, so each side runs ROUNDS times (default 3), alternating, and the best
# round of each counts.
# Only the tutorial CNN (config/models/fmnist_cnn.json) has a PyTorch twin here.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${1:-config/models/fmnist_cnn.json}
BATCH=${2:-64}
THREADS=${3:-1}
STEPS=${4:-100}
PY=/usr/bin/python3
ROUNDS=${ROUNDS:-3}

[[ -x bin/dtrain ]] || make -j2 >/dev/null
if ! $PY -c 'import torch' 2>/dev/null; then
  echo "train-vs-torch: $PY has no torch (apt-get install python3-torch)" >&2
  exit 2
fi
case "$(basename "$MODEL")" in
fmnist_cnn.json) ;;
*) echo "train-vs-torch: no PyTorch twin for $MODEL (only fmnist_cnn.json)" >&2; exit 2 ;;
esac

torch_bench() {
  $PY - "$BATCH" "$THREADS" "$STEPS" <<'PYEOF'
import sys, time, torch, torch.nn as nn, torch.nn.functional as F
b, t, steps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(t)
# The Keras tutorial CNN as a PyTorch user writes it (NCHW).
m = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                  nn.Linear(5408, 64), nn.ReLU(), nn.Linear(64, 10))
opt = torch.optim.SGD(m.parameters(), lr=0.01)
x, y = torch.rand(b, 1, 28, 28), torch.randint(0, 10, (b,))
def step():
    opt.zero_grad()
    F.cross_entropy(m(x), y).backward()
    opt.step()
for _ in range(5):
    step()
t0 = time.perf_counter()
for _ in range(steps):
    step()
dt = (time.perf_counter() - t0) / steps
print('{"samples_per_s": %.1f, "step_s": %.6f, "torch": "%s"}' % (b / dt, dt, torch.__version__))
PYEOF
}
best() { # keep the JSON line with the higher samples_per_s
  $PY -c 'import json,sys; a=[json.loads(l) for l in sys.argv[1:] if l]; print(json.dumps(max(a, key=lambda r: r["samples_per_s"])))' "$@"
}
ours= torch=
for ((r = 0; r < ROUNDS; r++)); do
  o=$(bin/dtrain bench train --model "$MODEL" --batch "$BATCH" --threads "$THREADS" --steps "$STEPS" --json)
  t=$(torch_bench)
  ours=$(best "$ours" "$o")
  torch=$(best "$torch" "$t")
done
$PY - "$ours" "$torch" <<'PYEOF'
import json, sys
o, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print("dtrain  : %9.1f samples/s  %.3f ms/step  (GEMMs %.3f ms = %.0f%% of the step)" % (
    o["samples_per_s"], o["step_s"] * 1e3, o["gemm_s"] * 1e3, 100 * o["gemm_fraction"]))
print("pytorch : %9.1f samples/s  %.3f ms/step  (torch %s)" % (
    t["samples_per_s"], t["step_s"] * 1e3, t["torch"]))
print("ratio   : %.2fx" % (o["samples_per_s"] / t["samples_per_s"]))
# The GEMMs of a step are its floor: a step that were GEMMs only would run at batch / gemm_s.
print("bound   : %9.1f samples/s if a step were its GEMMs only; the step reaches %.0f%% of it" % (
    o["samples_per_s"] * o["step_s"] / o["gemm_s"], 100 * o["gemm_fraction"]))
print("blas    : %s" % o["blas"])
PYEOF
