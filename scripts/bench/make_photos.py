"""Writes a class-folder tree of photo-like images with PIL (Debian's python3-pil, numpy):

  make_photos.py DIR N MIN_PX MAX_PX SEED [--png K] [--bad K] [--classes C]

N images of random sizes MIN_PX..MAX_PX per side (random smooth colour fields: gradients plus a
few blurred blobs, as photos compress) as JPEG quality 90 in DIR/class_0 .. class_{C-1} (C = 2),
round-robin, named img_00000.jpg...; the first K of them as PNG instead (--png); K more files
named .jpg that are not images (--bad; text, or a JPEG cut in half). Prints one line per class
with its count. Used by scripts/bench/images-vs-torch.sh and the image tests."""
import os
import sys

import numpy as np
from PIL import Image, ImageFilter


def photo(r, h, w):
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((h, w, 3), np.float32)
    for c in range(3):
        a, b, p = r.uniform(-1, 1, 3)
        img[..., c] = 128 + 60 * np.sin(a * x / 40 + p) + 60 * np.cos(b * y / 30 + p)
    for _ in range(4):  # blobs
        cy, cx, rad = r.uniform(0, h), r.uniform(0, w), r.uniform(10, min(h, w) / 3)
        m = ((y - cy) ** 2 + (x - cx) ** 2) < rad * rad
        img[m] = r.uniform(0, 255, 3)
    im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")
    return im.filter(ImageFilter.GaussianBlur(2))


def main():
    d, n, lo, hi, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    opts = dict(zip(sys.argv[6::2], map(int, sys.argv[7::2])))
    npng, nbad, ncls = opts.get("--png", 0), opts.get("--bad", 0), opts.get("--classes", 2)
    r = np.random.RandomState(seed)
    counts = [0] * ncls
    for c in range(ncls):
        os.makedirs(f"{d}/class_{c}", exist_ok=True)
    for i in range(n):
        c = i % ncls
        h, w = r.randint(lo, hi + 1), r.randint(lo, hi + 1)
        im = photo(r, h, w)
        if i < npng:
            im.save(f"{d}/class_{c}/img_{i:05d}.png")
        else:
            im.save(f"{d}/class_{c}/img_{i:05d}.jpg", quality=90)
        counts[c] += 1
    for k in range(nbad):
        c = k % ncls
        p = f"{d}/class_{c}/bad_{k:05d}.jpg"
        if k % 2 == 0:
            with open(p, "w") as f:
                f.write("not an image\n")
        else:
            import io
            b = io.BytesIO()
            photo(r, lo, lo).save(b, "JPEG", quality=90)
            with open(p, "wb") as f:
                f.write(b.getvalue()[: len(b.getvalue()) // 2])
        counts[c] += 1
    for c in range(ncls):
        print(f"class_{c} {counts[c]}")


if __name__ == "__main__":
    main()
