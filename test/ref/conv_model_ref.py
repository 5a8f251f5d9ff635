"""Float64 PyTorch reference for dtrain's Conv2DTranspose and grouped Conv2D layers
(test_nn_deconv.c), through a whole training step.

Usage: conv_model_ref.py DIR. DIR/in.json lists cases, each {"kind": "transpose" or "conv",
"n", "h", "w", "c", "filters", "kh", "kw", "sh", "sw", "same", "op_h", "op_w" (output_padding,
-1: None), "groups"}; DIR/in.bin holds per case, as little-endian float32, x (n, h, w, c), the
1x1 kernel (1, 1, c, c) of a Conv2D "pre" without bias in front of the layer, the layer's Keras
kernel, its bias (filters) and the MSE target (n, oh, ow, filters). Writes DIR/out.bin: per
case, as float64, oh, ow, the loss, y, then the gradients of pre's kernel (which carries the
layer's input gradient), the layer's kernel and bias, in Keras's layouts.

The geometry is derived here from Keras's rules, independently of dtrain:
- Conv2DTranspose: deconv_output_length; torch's conv_transpose2d without padding gives the full
  (h - 1) s + k rows, and Keras's layer is that, cropped from row pt (zeros past its end when
  k < s), pt = max((h - 1) s + k - oh, 0) // 2 (TF's "same" padding of the conv whose input
  gradient the layer is; 0 for "valid"). The Keras kernel (kh, kw, filters, c) is torch's
  (c, filters, kh, kw) weight.
- Conv2D: "same" pads max((oh - 1) s + k - h, 0), the smaller half first, explicitly; the Keras
  kernel (kh, kw, c / groups, filters) is torch's (filters, c / groups, kh, kw) weight.
"""
import json
import sys

import numpy as np
import torch
import torch.nn.functional as F


def deconv_len(n, k, s, same, op):
    if op < 0:
        return n * s if same else n * s + max(k - s, 0)
    return (n - 1) * s + k - 2 * (k // 2 if same else 0) + op


def main(d):
    cases = json.load(open(d + "/in.json"))
    raw = np.fromfile(d + "/in.bin", dtype="<f4").astype(np.float64)
    off, out = 0, []

    def take(shape):
        nonlocal off
        size = int(np.prod(shape))
        a = raw[off:off + size].reshape(shape)
        off += size
        return torch.tensor(a, dtype=torch.float64, requires_grad=True)

    for k in cases:
        n, h, w, c, f = k["n"], k["h"], k["w"], k["c"], k["filters"]
        kh, kw, sh, sw, same, g = k["kh"], k["kw"], k["sh"], k["sw"], k["same"], k["groups"]
        x = take((n, h, w, c)).detach()
        pre = take((1, 1, c, c))
        xt = F.conv2d(x.permute(0, 3, 1, 2), pre.permute(3, 2, 0, 1))
        if k["kind"] == "transpose":
            oh = deconv_len(h, kh, sh, same, k["op_h"])
            ow = deconv_len(w, kw, sw, same, k["op_w"])
            ker = take((kh, kw, f, c))
            full = F.conv_transpose2d(xt, ker.permute(3, 2, 0, 1), stride=(sh, sw))
            pt = max((h - 1) * sh + kh - oh, 0) // 2 if same else 0
            pl = max((w - 1) * sw + kw - ow, 0) // 2 if same else 0
            fh, fw = full.shape[2], full.shape[3]
            full = F.pad(full, (0, max(pl + ow - fw, 0), 0, max(pt + oh - fh, 0)))
            y = full[:, :, pt:pt + oh, pl:pl + ow]
        else:
            oh = -(-h // sh) if same else (h - kh) // sh + 1
            ow = -(-w // sw) if same else (w - kw) // sw + 1
            ker = take((kh, kw, c // g, f))
            th = max((oh - 1) * sh + kh - h, 0) if same else 0
            tw = max((ow - 1) * sw + kw - w, 0) if same else 0
            xt = F.pad(xt, (tw // 2, tw - tw // 2, th // 2, th - th // 2))
            y = F.conv2d(xt, ker.permute(3, 2, 0, 1), stride=(sh, sw), groups=g)
        b = take((f,))
        y = (y + b.view(1, f, 1, 1)).permute(0, 2, 3, 1)
        assert tuple(y.shape) == (n, oh, ow, f), (y.shape, k)
        t = take((n, oh, ow, f)).detach()
        loss = ((y - t) ** 2).mean()
        loss.backward()
        out.append(np.array([oh, ow, loss.item()]))
        for a in (y.detach(), pre.grad, ker.grad, b.grad):
            out.append(a.reshape(-1).numpy())
    np.concatenate(out).astype("<f8").tofile(d + "/out.bin")


if __name__ == "__main__":
    main(sys.argv[1])
