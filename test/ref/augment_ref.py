"""PyTorch reference for test/unit/test_nn_augment_torch.c, run with Debian's /usr/bin/python3
(python3-numpy, python3-torch).

  augment_ref.py transform DIR H W C K
      reads DIR/in.f32 (H, W, C) and DIR/t.f32 (K, 8): TF projective transforms, each mapping the
      output pixel (x, y) to the input point ((a0 x + a1 y + a2) / k, (b0 x + b1 y + b2) / k),
      k = c0 x + c1 y + 1, computed in float32 as TF computes them; writes
      DIR/out.<k>.<interp>.<fill>.f32 (H, W, C) from torch's grid_sample in float64 with
      align_corners=True (pixel centres at -1 and 1, so a pixel coordinate converts exactly):
      padding "zeros" is TF's fill_mode="constant" with fill_value 0 and "border" is TF's
      fill_mode="nearest" (both clamp or zero the same taps). TF's reflect and wrap have no
      grid_sample counterpart (torch reflects about the edge pixels' centres).

  augment_ref.py resize DIR H W C OH OW
      reads DIR/in.f32 (N, H, W, C) and writes, in float64 then stored as float32:
      DIR/area.pool.f32: F.adaptive_avg_pool2d (torch's "area"; TF's ResizeArea only when H % OH
      and W % OW are 0), DIR/bicubic.torch.f32: F.interpolate bicubic, align_corners=False (Keys
      a = -0.75, taps clamped to the edge), DIR/bicubic.tf.f32: TF's ResizeBicubic rendered in
      float64 by image_ref.py (a = -0.5, outside taps dropped and renormalised), and
      DIR/bicubic.a50.f32: torch's own bicubic formula with a = -0.5 and clamped taps (TF's
      coefficient but torch's edge rule) - the two differences separated.
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F


def transform(d, h, w, c, k):
    x = np.fromfile(f"{d}/in.f32", dtype=np.float32).reshape(h, w, c)
    t = np.fromfile(f"{d}/t.f32", dtype=np.float32).reshape(k, 8)
    img = torch.from_numpy(x.astype(np.float64)).permute(2, 0, 1)[None]
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    for i in range(k):
        a = t[i]
        proj = a[6] * xs + a[7] * ys + np.float32(1)
        ix = (a[0] * xs + a[1] * ys + a[2]) / proj
        iy = (a[3] * xs + a[4] * ys + a[5]) / proj
        gx = ix.astype(np.float64) * 2 / (w - 1) - 1
        gy = iy.astype(np.float64) * 2 / (h - 1) - 1
        grid = torch.from_numpy(np.stack([gx, gy], axis=-1))[None]
        for mode in ("bilinear", "nearest"):
            for pad, fill in (("zeros", "constant"), ("border", "nearest")):
                out = F.grid_sample(img, grid, mode=mode, padding_mode=pad, align_corners=True)
                out = out[0].permute(1, 2, 0).numpy().astype(np.float32)
                out.tofile(f"{d}/out.{i}.{mode}.{fill}.f32")


def resize(d, h, w, c, oh, ow):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from image_ref import tf_bicubic_f64

    x = np.fromfile(f"{d}/in.f32", dtype=np.float32).reshape(-1, h, w, c)
    t = torch.from_numpy(x.astype(np.float64)).permute(0, 3, 1, 2)

    def put(name, arr):
        np.ascontiguousarray(arr, dtype=np.float32).tofile(f"{d}/{name}.f32")

    put("area.pool", F.adaptive_avg_pool2d(t, (oh, ow)).permute(0, 2, 3, 1).numpy())
    out = F.interpolate(t, size=(oh, ow), mode="bicubic", align_corners=False)
    put("bicubic.torch", out.permute(0, 2, 3, 1).numpy())
    put("bicubic.tf", np.stack([tf_bicubic_f64(x[i], oh, ow) for i in range(x.shape[0])]))

    def keys(n_in, n_out, a):  # torch's upsample_bicubic2d weights, with a as a parameter
        W = np.zeros((n_out, n_in))
        for i in range(n_out):
            src = (i + 0.5) * n_in / n_out - 0.5
            f = int(np.floor(src))
            tt = src - f
            def cc1(z):
                return ((a + 2) * z - (a + 3)) * z * z + 1
            def cc2(z):
                return ((a * z - 5 * a) * z + 8 * a) * z - 4 * a
            ws = [cc2(tt + 1), cc1(tt), cc1(1 - tt), cc2(2 - tt)]
            for k, wk in zip(range(f - 1, f + 3), ws):
                W[i, min(max(k, 0), n_in - 1)] += wk
        return W

    Wy, Wx = keys(h, oh, -0.5), keys(w, ow, -0.5)
    put("bicubic.a50", np.einsum("oh,nhwc,pw->nopc", Wy, x.astype(np.float64), Wx))


if __name__ == "__main__":
    if sys.argv[1] == "transform":
        transform(sys.argv[2], *map(int, sys.argv[3:7]))
    elif sys.argv[1] == "resize":
        resize(sys.argv[2], *map(int, sys.argv[3:8]))
    else:
        sys.exit(f"unknown command {sys.argv[1]}")
