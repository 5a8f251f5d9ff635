#!/usr/bin/env bash
# text-vs-torch.sh [VOCAB] [EMBED] [UNITS] [SEQ] [BATCH] [STEPS] - training throughput of an
# Embedding + LSTM text classifier in dtrain against Debian's PyTorch (/usr/bin/python3,
# python3-torch), both on 1 thread, in the same run: Embedding(VOCAB, EMBED) -> LSTM(UNITS) (its
# last output) -> Dense(2) on SEQ token ids a sample (defaults 20000, 128, 64, 200, batch 32).
# dtrain trains the Keras JSON below (`dtrain bench train`), PyTorch nn.Embedding -> nn.LSTM
# (batch_first, the final hidden state) -> nn.Linear written by hand. Both: random token ids and
# labels, sparse categorical cross-entropy, SGD, no mask. Prints both figures and their ratio.
# The machine is shared, so each side runs ROUNDS times (default 3), alternating, and the best
# round of each counts.
set -euo pipefail
cd "$(dirname "$0")/../.."
VOCAB=${1:-20000}
EMBED=${2:-128}
UNITS=${3:-64}
SEQ=${4:-200}
BATCH=${5:-32}
STEPS=${6:-20}
PY=/usr/bin/python3
ROUNDS=${ROUNDS:-3}

[[ -x bin/dtrain ]] || make -j2 >/dev/null
# shellcheck source=scripts/bench/vs-torch-lib.sh
source scripts/bench/vs-torch-lib.sh
if ! $PY -c 'import torch' 2>/dev/null; then
  echo "text-vs-torch: $PY has no torch (apt-get install python3-torch)" >&2
  exit 2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/text_lstm.json" <<JSON
{"class_name": "Sequential", "config": {"name": "text_lstm", "layers": [
  {"class_name": "InputLayer", "config": {"batch_shape": [null, $SEQ], "dtype": "int32", "name": "tokens"}},
  {"class_name": "Embedding", "config": {"name": "embedding", "input_dim": $VOCAB, "output_dim": $EMBED}},
  {"class_name": "LSTM", "config": {"name": "lstm", "units": $UNITS}},
  {"class_name": "Dense", "config": {"name": "out", "units": 2}}]}}
JSON

torch_bench() {
  $PY - "$VOCAB" "$EMBED" "$UNITS" "$SEQ" "$BATCH" "$STEPS" <<'PYEOF'
import sys, time, torch, torch.nn as nn, torch.nn.functional as F
vocab, embed, units, seq, b, steps = map(int, sys.argv[1:7])
torch.set_num_threads(1)

class TextLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, units, batch_first=True)
        self.out = nn.Linear(units, 2)

    def forward(self, x):
        _, (h, _) = self.lstm(self.emb(x))
        return self.out(h[-1])

m = TextLSTM()
params = sum(p.numel() for p in m.parameters())
opt = torch.optim.SGD(m.parameters(), lr=0.01)
x, y = torch.randint(0, vocab, (b, seq)), torch.randint(0, 2, (b,))
def step():
    opt.zero_grad()
    F.cross_entropy(m(x), y).backward()
    opt.step()
for _ in range(3):
    step()
t0 = time.perf_counter()
for _ in range(steps):
    step()
dt = (time.perf_counter() - t0) / steps
print('{"samples_per_s": %.2f, "step_s": %.6f, "torch": "%s", "params": %d}' % (
    b / dt, dt, torch.__version__, params))
PYEOF
}
vs_torch_rounds "$tmp/text_lstm.json" 3
vs_torch_report "Embedding($VOCAB, $EMBED) -> LSTM($UNITS) -> Dense(2), $SEQ tokens a sample, batch $BATCH, 1 thread" "two LSTM bias vectors where Keras has one: 4 x units more"
