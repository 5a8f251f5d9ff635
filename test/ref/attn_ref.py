"""Float64 PyTorch reference of dtrain's MultiHeadAttention test models (test_nn_attn.c).

argv[1]: a JSON file {"n", "t", "f", "key_dim", "causal", "embed", "x": [...], "labels": [...],
"weights": {name: {"shape": [...], "data": [...]}}}. The model: d = tanh(x Wd + bd);
a = MultiHeadAttention(d, d) with Keras's einsum layouts; logits = flatten(a) Wo + bo; loss =
mean sparse softmax cross-entropy. With "embed", x holds token ids and the model is
Embedding(mask_zero) -> the same attention, masked by the ids' mask -> GlobalAveragePooling1D
over the real steps. Writes argv[2]: {"loss", "grads": {name: [...]}}, every weight's gradient.
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
labels = torch.tensor(spec["labels"], dtype=torch.long)
embed = spec.get("embed", False)
if embed:  # token ids -> Embedding(mask_zero): the ids' mask is the query's and the value's
    ids = torch.tensor(spec["x"], dtype=torch.long).reshape(n, t)
    d = W["emb/embeddings"][ids]
    real = (ids != 0).to(torch.float64)
else:
    x = torch.tensor(spec["x"], dtype=torch.float64).reshape(n, t, f)
    d = torch.tanh(x @ W["d/kernel"] + W["d/bias"])


def proj(v, name):
    return torch.einsum("btd,dhk->bthk", v, W["mha/" + name + "/kernel"]) + W["mha/" + name + "/bias"]


q, k, v = proj(d, "query"), proj(d, "key"), proj(d, "value")
s = torch.einsum("bthk,bshk->bhts", q * (1.0 / math.sqrt(kd)), k)
keep = torch.ones(n, t, t)
if spec["causal"]:
    keep = keep * torch.tril(torch.ones(t, t))
if embed:
    keep = keep * real.reshape(n, t, 1) * real.reshape(n, 1, t)
s = torch.where(keep.unsqueeze(1) > 0, s, (s - s.detach()) - 1e9)
p = torch.softmax(s, dim=-1)
o = torch.einsum("bhts,bshv->bthv", p, v)
a = torch.einsum("bthv,hvo->bto", o, W["mha/attention_output/kernel"]) + W["mha/attention_output/bias"]
if embed:  # GlobalAveragePooling1D: the mean over the real steps (the query's mask)
    pooled = (a * real.unsqueeze(-1)).sum(1) / real.sum(1, keepdim=True)
else:
    pooled = a.reshape(n, -1)
logits = pooled @ W["out/kernel"] + W["out/bias"]
loss = torch.nn.functional.cross_entropy(logits, labels)
loss.backward()
json.dump({"loss": loss.item(), "grads": {k: w.grad.reshape(-1).tolist() for k, w in W.items()}},
          open(sys.argv[2], "w"))
