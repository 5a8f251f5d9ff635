#!/usr/bin/env bash
# train-vs-torch-gpu.sh [STEPS] - training throughput on one GPU, dtrain against PyTorch on the
# same GPU in the same run, strict float32 on both sides (no TF32):
#   - the tutorial CNN (config/models/fmnist_cnn.json) at batch 64, 256 and 1024: dtrain
#     (`dtrain bench train --device /gpu:0`) against PyTorch eager and PyTorch replaying the
#     whole step as a CUDA graph;
#   - MobileNetV2 (224x224x3, 2 classes, batch 64; the JSON tf.keras.applications writes, from
#     test/ref/mobilenet_v2_json.py) against torchvision's mobilenet_v2, channels_last, eager.
# Beside each row: the FLOPs of one training sample (PyTorch's flop counter over forward and
# backward) and the samples/s the GPU's float32 rate would allow (FP32_TFLOPS, default 67: the
# H100/H200 datasheet's dense float32 figure). Run on the GPU machine through
# scripts/gpu/run.sh (its library paths); PY is the python with torch (default python3).
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-200}
PY=${PY:-python3}
FP32_TFLOPS=${FP32_TFLOPS:-67}
[[ -x bin/dtrain ]] || { echo "train-vs-torch-gpu: build first (bin/dtrain)" >&2; exit 2; }
$PY -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null || {
  echo "train-vs-torch-gpu: $PY's torch sees no GPU" >&2
  exit 2
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$PY test/ref/mobilenet_v2_json.py 224 2 >"$tmp/mobilenet_v2.json"

torch_bench() { # MODEL BATCH MODE(eager|graph) -> one JSON line
  $PY - "$1" "$2" "$3" "$STEPS" <<'PYEOF'
import json, sys, time, torch, torch.nn as nn, torch.nn.functional as F
model, b, mode, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = True
dev = torch.device("cuda")
if model == "cnn":
    m = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                      nn.Linear(5408, 64), nn.ReLU(), nn.Linear(64, 10)).to(dev)
    x = torch.rand(b, 1, 28, 28, device=dev)
    y = torch.randint(0, 10, (b,), device=dev)
else:
    import torchvision
    m = torchvision.models.mobilenet_v2(num_classes=2).to(dev, memory_format=torch.channels_last)
    x = torch.rand(b, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 2, (b,), device=dev)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
def step():
    opt.zero_grad(set_to_none=False)
    F.cross_entropy(m(x), y).backward()
    opt.step()
from torch.utils.flop_counter import FlopCounterMode
with FlopCounterMode(display=False) as fc:
    F.cross_entropy(m(x), y).backward()
flops = fc.get_total_flops() / b
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(10):
        step()
torch.cuda.current_stream().wait_stream(s)
run = step
if mode == "graph":
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=False)
    with torch.cuda.graph(g):
        F.cross_entropy(m(x), y).backward()
        opt.step()
    def run():
        g.replay()
    for _ in range(5):
        run()
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(steps):
    run()
torch.cuda.synchronize()
dt = (time.perf_counter() - t0) / steps
print(json.dumps({"samples_per_s": b / dt, "step_s": dt, "flops": flops,
                  "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}))
PYEOF
}

ours() { # MODEL.json BATCH
  bin/dtrain bench train --model "$1" --batch "$2" --steps "$STEPS" --warmup 20 \
    --device /gpu:0 --json
}

rows=()
for b in 64 256 1024; do
  o=$(ours config/models/fmnist_cnn.json "$b")
  e=$(torch_bench cnn "$b" eager)
  g=$(torch_bench cnn "$b" graph)
  rows+=("$(printf '{"model": "tutorial CNN", "batch": %d, "ours": %s, "eager": %s, "graph": %s}' \
    "$b" "$o" "$e" "$g")")
done
o=$(ours "$tmp/mobilenet_v2.json" 64)
e=$(torch_bench mobilenet 64 eager)
rows+=("$(printf '{"model": "MobileNetV2 224", "batch": 64, "ours": %s, "eager": %s}' "$o" "$e")")

$PY - "$FP32_TFLOPS" "${rows[@]}" <<'PYEOF'
import json, sys
rate = float(sys.argv[1]) * 1e12
rows = [json.loads(r) for r in sys.argv[2:]]
print("GPU: %s, torch %s, strict float32 both sides" % (rows[0]["eager"]["gpu"], rows[0]["eager"]["torch"]))
print("%-16s %6s %12s %12s %12s %8s %8s %12s %14s" % ("model", "batch", "dtrain/s", "eager/s",
      "graphed/s", "x eager", "x graph", "FLOP/sample", "fp32 bound/s"))
for r in rows:
    o, e, g = r["ours"]["samples_per_s"], r["eager"]["samples_per_s"], r.get("graph")
    f = r["eager"]["flops"]
    print("%-16s %6d %12.0f %12.0f %12s %8.2f %8s %12.3g %14.3g" % (
        r["model"], r["batch"], o, e, "%.0f" % g["samples_per_s"] if g else "-", o / e,
        "%.2f" % (o / g["samples_per_s"]) if g else "-", f, rate / f))
PYEOF
