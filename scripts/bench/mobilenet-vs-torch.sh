#!/usr/bin/env bash
# mobilenet-vs-torch.sh [SIZE] [BATCH] [STEPS] - training throughput of MobileNetV2 (alpha 1.0,
# SIZE x SIZE x 3, 2 classes; default 96, batch 32) in dtrain against Debian's PyTorch
# (/usr/bin/python3, python3-torch), both on 1 thread, in the same run. dtrain trains the JSON
# tf.keras.applications.MobileNetV2(input_shape=(SIZE, SIZE, 3), weights=None, classes=2) writes
# (test/ref/mobilenet_v2_json.py); PyTorch trains the same network written by hand below
# (torchvision may be absent): the same widths, inverted residual blocks, ReLU6, batch norms and
# the stride-2 padding of Keras. Both: random inputs, sparse categorical cross-entropy, SGD.
# Prints both figures and their ratio. The machine is shared, so each side runs ROUNDS times
# (default 2), alternating, and the best round of each counts.
set -euo pipefail
cd "$(dirname "$0")/../.."
SIZE=${1:-96}
BATCH=${2:-32}
STEPS=${3:-10}
PY=/usr/bin/python3
ROUNDS=${ROUNDS:-2}

[[ -x bin/dtrain ]] || make -j2 >/dev/null
# shellcheck source=scripts/bench/vs-torch-lib.sh
source scripts/bench/vs-torch-lib.sh
if ! $PY -c 'import torch' 2>/dev/null; then
  echo "mobilenet-vs-torch: $PY has no torch (apt-get install python3-torch)" >&2
  exit 2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
$PY test/ref/mobilenet_v2_json.py "$SIZE" 2 >"$tmp/mobilenet_v2.json"

torch_bench() {
  $PY - "$SIZE" "$BATCH" "$STEPS" <<'PYEOF'
import sys, time, torch, torch.nn as nn, torch.nn.functional as F
size, b, steps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(1)

def div8(v):
    n = max(8, int(v + 4) // 8 * 8)
    return n + 8 if n < 0.9 * v else n

def cbr(cin, cout, k=1, s=1, groups=1, relu=True):
    # Keras pads stride-2 3x3 convolutions by (0, 1) on even sizes (correct_pad); a padding of 1
    # on both sides does the same arithmetic.
    layers = [nn.Conv2d(cin, cout, k, s, (k - 1) // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout, eps=1e-3, momentum=0.001)]
    return layers + ([nn.ReLU6()] if relu else [])

class Block(nn.Module):
    def __init__(self, cin, cout, stride, expansion):
        super().__init__()
        mid = cin * expansion
        layers = cbr(cin, mid) if expansion != 1 else []
        layers += cbr(mid, mid, 3, stride, groups=mid) + cbr(mid, cout, relu=False)
        self.body = nn.Sequential(*layers)
        self.res = stride == 1 and cin == cout
    def forward(self, x):
        return x + self.body(x) if self.res else self.body(x)

blocks = [(16, 1, 1), (24, 2, 6), (24, 1, 6), (32, 2, 6), (32, 1, 6), (32, 1, 6), (64, 2, 6),
          (64, 1, 6), (64, 1, 6), (64, 1, 6), (96, 1, 6), (96, 1, 6), (96, 1, 6), (160, 2, 6),
          (160, 1, 6), (160, 1, 6), (320, 1, 6)]
layers, c = cbr(3, 32, 3, 2), 32
for f, s, e in blocks:
    layers.append(Block(c, div8(f), s, e))
    c = div8(f)
layers += cbr(c, 1280) + [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, 2)]
m = nn.Sequential(*layers)
params = sum(p.numel() for p in m.parameters())
opt = torch.optim.SGD(m.parameters(), lr=0.01)
x, y = torch.rand(b, 3, size, size), torch.randint(0, 2, (b,))
def step():
    opt.zero_grad()
    F.cross_entropy(m(x), y).backward()
    opt.step()
for _ in range(2):
    step()
t0 = time.perf_counter()
for _ in range(steps):
    step()
dt = (time.perf_counter() - t0) / steps
print('{"samples_per_s": %.2f, "step_s": %.6f, "torch": "%s", "params": %d}' % (
    b / dt, dt, torch.__version__, params))
PYEOF
}
vs_torch_rounds "$tmp/mobilenet_v2.json" 2
vs_torch_report "MobileNetV2 ${SIZE}x${SIZE}, batch $BATCH, 1 thread"
