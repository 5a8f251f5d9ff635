"""Float64 PyTorch reference of dtrain's MultiHeadAttention test model (test_nn_attn.c).

argv[1]: a JSON file {"n", "t", "f", "heads", "key_dim", "value_dim", "causal", "mask_last",
"x": [...], "labels": [...], "weights": {name: {"shape": [...], "data": [...]}}}.
The model: d = tanh(x Wd + bd); a = MultiHeadAttention(d, d) with Keras's einsum layouts; the
last mask_last steps of every sample masked as Keras's value and query masks would; logits =
flatten(a) Wo + bo; loss = mean sparse softmax cross-entropy. Writes argv[2]: {"loss", "grads":
{name: [...]}} with every weight's gradient.
"""
import json
import math
import sys

import torch

torch.set_default_dtype(torch.float64)
spec = json.load(open(sys.argv[1]))
n, t, f = spec["n"], spec["t"], spec["f"]
kd = spec["key_dim"]
W = {k: torch.tensor(v["data"], dtype=torch.float64).reshape(v["shape"]).requires_grad_() for k, v in spec["weights"].items()}
x = torch.tensor(spec["x"], dtype=torch.float64).reshape(n, t, f)
labels = torch.tensor(spec["labels"], dtype=torch.long)

d = torch.tanh(x @ W["d/kernel"] + W["d/bias"])


def proj(v, name):
    return torch.einsum("btd,dhk->bthk", v, W["mha/" + name + "/kernel"]) + W["mha/" + name + "/bias"]


q, k, v = proj(d, "query"), proj(d, "key"), proj(d, "value")
s = torch.einsum("bthk,bshk->bhts", q * (1.0 / math.sqrt(kd)), k)
keep = torch.ones(n, t, t)
if spec["causal"]:
    keep = keep * torch.tril(torch.ones(t, t))
m = spec["mask_last"]
if m:
    step = torch.ones(t)
    step[t - m:] = 0
    keep = keep * step.reshape(1, t, 1) * step.reshape(1, 1, t)
# float32 keeps nothing of a score plus -1e9: a masked score is -1e9 (a row masked whole turns
# uniform), while the gradient still passes through the addition, as in Keras.
s = torch.where(keep.unsqueeze(1) > 0, s, (s - s.detach()) - 1e9)
p = torch.softmax(s, dim=-1)
o = torch.einsum("bhts,bshv->bthv", p, v)
a = torch.einsum("bthv,hvo->bto", o, W["mha/attention_output/kernel"]) + W["mha/attention_output/bias"]
logits = a.reshape(n, -1) @ W["out/kernel"] + W["out/bias"]
loss = torch.nn.functional.cross_entropy(logits, labels)
loss.backward()
json.dump({"loss": loss.item(), "grads": {k: w.grad.reshape(-1).tolist() for k, w in W.items()}},
          open(sys.argv[2], "w"))
