#!/usr/bin/env bash
# images-vs-torch.sh - decode + resize (224x224) + batch of JPEG photos: dtrain's input pipeline
# against PyTorch's (PIL decode, resize BILINEAR, DataLoader with the same number of workers),
# on the same files, images/s and the ratio per core.
#
# The photos are written once with PIL (scripts/bench/make_photos.py): N JPEGs (default 2,000)
# of MIN..MAX px per side (default 300..500), random smooth content, 2 classes. dtrain runs
# `dtrain bench data` on an image_folder spec (num_parallel_calls = THREADS; decode with
# libjpeg-turbo and its DCT scaling where the target allows, tf.image.resize bilinear, uint8 rows,
# then one epoch of float32 batches). PyTorch runs torchvision's ImageFolder + DataLoader when
# torchvision is installed, else the equivalent written out here (Debian has no torchvision):
# a Dataset doing PIL Image.open().convert("RGB").resize((224, 224), BILINEAR) -> a uint8 CHW
# tensor, DataLoader(batch_size=B, num_workers=THREADS) and the float conversion per batch,
# as ToTensor does. Both are one pass over the files; --repeat passes of each, alternating,
# and the best of each is kept.
#
# Usage: scripts/bench/images-vs-torch.sh [--images N] [--min PX] [--max PX] [--threads T]
#                                         [--batch B] [--repeat K] [--dir DIR] [--json]
# (--threads defaults to the online CPUs; --dir keeps the photos there between runs.)
set -euo pipefail
cd "$(dirname "$0")/../.."
N=2000 MIN=300 MAX=500 T=$(nproc) B=32 K=2 DIR="" JSON=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --images) N=$2; shift 2 ;;
    --min) MIN=$2; shift 2 ;;
    --max) MAX=$2; shift 2 ;;
    --threads) T=$2; shift 2 ;;
    --batch) B=$2; shift 2 ;;
    --repeat) K=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    --json) JSON=1; shift ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "images-vs-torch.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
for v in "$N" "$MIN" "$MAX" "$T" "$B" "$K"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "images-vs-torch.sh: $v is not a positive integer" >&2; exit 2; }
done
(( MIN <= MAX )) || { echo "images-vs-torch.sh: --min is above --max" >&2; exit 2; }
PY=/usr/bin/python3
"$PY" -c 'import PIL, numpy, torch' 2>/dev/null ||
  { echo "images-vs-torch.sh: $PY needs PIL, numpy and torch (apt-get install python3-pil python3-torch)" >&2; exit 2; }
[[ -x bin/dtrain ]] || make -s bin/dtrain
OWN=0
if [[ -z $DIR ]]; then DIR=$(mktemp -d "${TMPDIR:-/tmp}/images-vs-torch.XXXXXX"); OWN=1; fi
trap '[[ $OWN == 1 ]] && rm -rf "$DIR"' EXIT
PH=$DIR/photos-$N-$MIN-$MAX
if [[ ! -f $PH/.done ]]; then
  rm -rf "$PH"
  "$PY" scripts/bench/make_photos.py "$PH" "$N" "$MIN" "$MAX" 1 >/dev/null
  touch "$PH/.done"
fi
cat >"$DIR/spec.json" <<JSON
{"data": {"train": {"format": "image_folder", "directory": "$PH", "image_size": [224, 224],
                    "shuffle": false, "interpolation": "bilinear"},
          "num_parallel_calls": $T}}
JSON

"$PY" - "$PH" "$T" "$B" "$K" "$DIR/spec.json" "$JSON" <<'PYEOF'
import json, os, subprocess, sys, time
import numpy as np
import torch
from PIL import Image

root, T, B, K = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
spec = sys.argv[5]
as_json = sys.argv[6] == "1"

def dtrain_pass():
    out = subprocess.run(["bin/dtrain", "bench", "data", spec, "--threads", str(T), "--batch",
                          str(B), "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)
torch.set_num_threads(1)
try:
    import torchvision
    from torchvision import datasets, transforms
    tf = transforms.Compose([transforms.Resize((224, 224), interpolation=transforms.InterpolationMode.BILINEAR),
                             transforms.PILToTensor()])
    ds = datasets.ImageFolder(root, transform=tf)
    how = "torchvision ImageFolder + DataLoader"
except ImportError:
    class Folder(torch.utils.data.Dataset):
        # ImageFolder's listing: sorted class folders, sorted files, PIL loader (convert RGB)
        def __init__(self, root):
            self.classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
            self.items = [(os.path.join(root, c, f), i) for i, c in enumerate(self.classes)
                          for f in sorted(os.listdir(os.path.join(root, c)))
                          if f.lower().endswith((".jpg", ".jpeg", ".png"))]
        def __len__(self):
            return len(self.items)
        def __getitem__(self, i):
            p, y = self.items[i]
            with open(p, "rb") as f:
                im = Image.open(f).convert("RGB").resize((224, 224), Image.BILINEAR)
            return torch.from_numpy(np.asarray(im).transpose(2, 0, 1).copy()), y
    ds = Folder(root)
    how = "torch Dataset (PIL open/convert/resize BILINEAR) + DataLoader (no torchvision here)"

def one_pass():
    dl = torch.utils.data.DataLoader(ds, batch_size=B, num_workers=T, shuffle=False)
    t0 = time.perf_counter()
    n = 0
    for x, y in dl:
        x = x.float().div_(255)  # ToTensor's float conversion, per batch
        n += x.shape[0]
    return n, time.perf_counter() - t0

# dtrain and torch passes alternate, the best of each kept: a machine shared with other work
# slows both alike rather than whichever side ran during a burst.
best, d = None, None
for _ in range(K):
    r = dtrain_pass()
    if d is None or r["images_per_s"] > d["images_per_s"]:
        d = r
    n, s = one_pass()
    best = s if best is None or s < best else best
tips = n / best
dips = d["images_per_s"]
out = {"images": n, "threads": T, "batch": B, "dtrain_images_per_s": dips,
       "dtrain_decode_images_per_s": d["decode_images_per_s"],
       "torch_images_per_s": tips, "torch_pipeline": how,
       "dtrain_per_core": dips / T, "torch_per_core": tips / T, "ratio": dips / tips}
if d["images"] != n:
    print(f"images-vs-torch.sh: dtrain read {d['images']} images, torch {n}", file=sys.stderr)
    sys.exit(1)
if as_json:
    print(json.dumps(out, indent=1))
else:
    print(f"{n} JPEG photos -> 224x224, batch {B}, {T} thread(s)/worker(s), best of {K} pass(es)")
    print(f"  {'dtrain (libjpeg-turbo, tf.image.resize)':50s} {dips:9.1f} images/s  {dips / T:8.1f} per core")
    print(f"  {'  of which decode+resize alone':50s} {d['decode_images_per_s']:9.1f} images/s")
    print(f"  {how[:50]:50s} {tips:9.1f} images/s  {tips / T:8.1f} per core")
    print(f"  ratio dtrain/torch per core: {dips / tips:.2f}x")
    if "torchvision" not in how:
        print("  (torchvision is not installed: the torch side is the same pipeline written with "
              "torch.utils.data + PIL)")
PYEOF
