#!/usr/bin/python3
"""seq_ref.py DIR - the PyTorch (float64) reference of dtrain's sequence layers
(test/unit/test_nn_seq.c).

DIR/in.json: {"cases": [{"model": a Keras 2 Sequential model.to_json() object,
                         "tensors": [{"name", "shape", "offset", "trainable"}]}]};
DIR/in.bin: float32 little-endian at those offsets (elements): every weight by its Keras name
("conv1d/kernel", Keras layout), "x" (the model's input; token ids as floats) and "labels".
Writes DIR/out.bin, float64, per case: the sparse categorical cross-entropy (from logits,
batch mean) of the model's output, then the gradient of every trainable weight in the order
of "tensors".

Layers: Embedding (mask_zero makes the mask, id != 0), Conv1D (valid, same, causal,
dilation_rate, strides), MaxPooling1D / AveragePooling1D (valid, same: Keras pads more after
than before, padded cells never win a max and do not count in a mean),
GlobalAveragePooling1D (masked: sum(x * mask) / sum(mask)), GlobalMaxPooling1D,
LayerNormalization (last axis), Dense and TimeDistributed(Dense) (pass the mask).
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(1)
D = torch.float64


def one(v, default):
    if v is None:
        return default
    return v[0] if isinstance(v, list) else v


def act(x, name):
    if name in (None, "linear"):
        return x
    if name == "tanh":
        return torch.tanh(x)
    if name == "relu":
        return torch.relu(x)
    raise ValueError("activation " + name)


def same_pad(size, span, s):
    out = (size + s - 1) // s
    total = max((out - 1) * s + span - size, 0)
    return total // 2, total - total // 2


def forward(layers, W, x):
    h, mask = x, None
    for i, l in enumerate(layers):
        cls, c = l["class_name"], l["config"]
        name = c.get("name", "layer_%d" % i)  # dtrain's name for an unnamed layer
        if cls == "InputLayer":
            continue
        if cls == "Embedding":
            ids = h.trunc().long()
            mask = (h != 0) if c.get("mask_zero") else None
            h = W[name + "/embeddings"][ids]
        elif cls == "Conv1D":
            k, s = one(c["kernel_size"], 1), one(c.get("strides"), 1)
            d = one(c.get("dilation_rate"), 1)
            span = (k - 1) * d + 1
            hc = h.permute(0, 2, 1)  # (n, c, t)
            pad = c.get("padding", "valid")
            if pad == "same":
                hc = F.pad(hc, same_pad(hc.shape[2], span, s))
            elif pad == "causal":
                hc = F.pad(hc, (span - 1, 0))
            w = W[name + "/kernel"].permute(2, 1, 0)  # (k, in, out) -> (out, in, k)
            h = F.conv1d(hc, w, W.get(name + "/bias"), stride=s, dilation=d).permute(0, 2, 1)
            h = act(h, c.get("activation"))
            mask = None
        elif cls in ("MaxPooling1D", "AveragePooling1D"):
            k = one(c.get("pool_size"), 2)
            s = one(c.get("strides"), k) or k
            hc = h.permute(0, 2, 1)
            pb, pa = (0, 0)
            if c.get("padding", "valid") == "same":
                pb, pa = same_pad(hc.shape[2], k, s)
            if cls == "MaxPooling1D":
                hc = F.pad(hc, (pb, pa), value=-float("inf"))
                h = F.max_pool1d(hc, k, s)
            else:
                ones = F.pad(torch.ones_like(hc), (pb, pa))
                hc = F.pad(hc, (pb, pa))
                h = F.avg_pool1d(hc, k, s) / F.avg_pool1d(ones, k, s)
            h = h.permute(0, 2, 1)
            mask = None
        elif cls == "GlobalAveragePooling1D":
            if mask is not None:
                m = mask.to(D).unsqueeze(2)
                h = (h * m).sum(1) / m.sum(1)
            else:
                h = h.mean(1)
            mask = None
        elif cls == "GlobalMaxPooling1D":
            h = h.max(1).values
            mask = None
        elif cls == "LayerNormalization":
            eps = c.get("epsilon", 1e-3)
            mean = h.mean(-1, keepdim=True)
            var = ((h - mean) ** 2).mean(-1, keepdim=True)
            h = (h - mean) / torch.sqrt(var + eps)
            if name + "/gamma" in W:
                h = h * W[name + "/gamma"]
            if name + "/beta" in W:
                h = h + W[name + "/beta"]
        elif cls in ("Dense", "TimeDistributed"):
            cc = c["layer"]["config"] if cls == "TimeDistributed" else c
            if cls == "TimeDistributed":  # Keras 3's path: "<wrapper>/<wrapped>/kernel"
                name += "/" + cc.get("name", "dense")
            h = h @ W[name + "/kernel"]
            if name + "/bias" in W:
                h = h + W[name + "/bias"]
            h = act(h, cc.get("activation"))
        else:
            raise ValueError("layer class " + cls)
    return h


def main(d):
    man = json.load(open(os.path.join(d, "in.json")))
    raw = np.fromfile(os.path.join(d, "in.bin"), dtype="<f4").astype(np.float64)
    out = []
    for case in man["cases"]:
        t = {}
        for e in case["tensors"]:
            n = int(np.prod(e["shape"])) if e["shape"] else 1
            t[e["name"]] = torch.tensor(raw[e["offset"]:e["offset"] + n].reshape(e["shape"]),
                                        dtype=D, requires_grad=bool(e.get("trainable")))
        cfg = case["model"]["config"]
        layers = cfg if isinstance(cfg, list) else cfg["layers"]
        W = {k: v for k, v in t.items() if k not in ("x", "labels")}
        logits = forward(layers, W, t["x"])
        loss = F.cross_entropy(logits, t["labels"].long())
        loss.backward()
        out.append(np.array([loss.item()]))
        for e in case["tensors"]:
            if e.get("trainable"):
                out.append(t[e["name"]].grad.numpy().reshape(-1))
    np.concatenate(out).astype("<f8").tofile(os.path.join(d, "out.bin"))


if __name__ == "__main__":
    main(sys.argv[1])
