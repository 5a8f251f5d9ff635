#!/usr/bin/env bash
# run.sh - there, on the GPU machine (the device call, from the repo root, carrying .gpu/ that
# scripts/gpu/prepare.sh made here): unpack the runtime .debs into .gpu/root (never into /), put
# their lib folders and the CUDA wheels' (cuBLAS, the CUDA runtime, NCCL: found with python3)
# on LD_LIBRARY_PATH, show the GPU and how the CUDA backend links, then run the GPU tests.
#
#   bash scripts/gpu/run.sh [PATTERN...]       dt_test gpu_ PATTERN...; the log in $OUT
#   bash scripts/gpu/run.sh --exec CMD [ARG...] CMD in the same environment (a benchmark, a probe)
#   bash scripts/gpu/run.sh --dry-run          print the unpacked packages and the library path,
#                                              check the binaries link, run nothing
#
# Environment: OUT (the device's folder that comes back; default .gpu/out), DT_GPU_DIR (default
# .gpu), DT_GPU_PYTHON (the python3 whose site-packages hold the nvidia wheels; default python3).
# Exit: the tests' (or CMD's) status; 2 for bad usage; 3 when .gpu/ is incomplete or a binary
# does not link.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 3
G=${DT_GPU_DIR:-.gpu}
PY=${DT_GPU_PYTHON:-python3}
OUT=${OUT:-$G/out}
mode="test"
case ${1:-} in
--dry-run) mode="dry" ;;
--exec)
  mode="exec"
  shift
  (($#)) || {
    echo "run.sh: --exec needs a command" >&2
    exit 2
  }
  ;;
-h | --help)
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
  ;;
-*)
  echo "run.sh: unknown option '$1' (see --help)" >&2
  exit 2
  ;;
esac
[[ $mode != dry ]] || shift
die() {
  echo "run.sh: $*" >&2
  exit 3
}
[[ -x $G/bin/dtraind && -x $G/build/dt_test && -f $G/bin/libdtrain-cuda.so ]] ||
  die "$G/ lacks the binaries: run scripts/gpu/prepare.sh here and carry $G"
GA=$(cd "$G" && pwd) # absolute, for the runner's DT_BIN_DIR

# 1. The .debs into $G/root: dpkg -x unpacks files only (no scripts, no database), and never
#    into /, where the machine's own libraries live.
rm -rf "$G/root"
mkdir -p "$G/root"
n=0
for deb in "$G"/debs/*.deb; do
  [[ -e $deb ]] || continue
  dpkg -x "$deb" "$G/root" || die "dpkg -x $deb failed"
  n=$((n + 1))
done
echo "unpacked $n package(s) into $G/root"

# 2. The library path: the wheels' lib folders first, then every folder of $G/root that holds a
#    shared library (openblas-pthread/ too: Debian reaches it through an alternatives link that
#    dpkg -x does not make).
declare -a dirs=()
add_dir() {
  local d
  d=$(cd "$1" 2>/dev/null && pwd) || return 0
  for x in "${dirs[@]}"; do [[ $x == "$d" ]] && return 0; done
  dirs+=("$d")
}
if command -v "$PY" >/dev/null 2>&1; then
  # A wheel's module (a namespace package: __path__, not __file__) and its lib/ folder; cu13
  # wheels may put several libraries under nvidia/cu13.
  while read -r d; do [[ -d $d/lib ]] && add_dir "$d/lib"; done < <("$PY" - <<'PY' 2>/dev/null
import importlib
for name in ("nvidia.cublas", "nvidia.cuda_runtime", "nvidia.nccl", "nvidia.cu13"):
    try:
        m = importlib.import_module(name)
    except Exception:
        continue
    for p in getattr(m, "__path__", []):
        print(p)
PY
  )
  # Whatever the layout, the folders that hold the sonames the backend and NCCL load.
  while read -r f; do add_dir "$(dirname "$f")"; done < <("$PY" - <<'PY' 2>/dev/null
import fnmatch, os, sys
want = ("libcublas.so*", "libcublasLt.so*", "libcudart.so*", "libnccl.so*")
for p in sys.path:
    top = os.path.join(p or ".", "nvidia")
    if not os.path.isdir(top):
        continue
    for d, _, files in sorted(os.walk(top)):
        for f in sorted(files):
            if any(fnmatch.fnmatch(f, w) for w in want):
                print(os.path.join(d, f))
PY
  )
else
  echo "run.sh: no $PY: the wheels' libraries are not on the path" >&2
fi
while read -r d; do add_dir "$d"; done < <(find "$G/root" \( -name '*.so' -o -name '*.so.*' \) \
  \( -type f -o -type l \) -printf '%h\n' | sort -u)
path=$(
  IFS=:
  echo "${dirs[*]}"
)
export LD_LIBRARY_PATH=$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "LD_LIBRARY_PATH:"
for d in "${dirs[@]}"; do echo "  $d"; done

# 3. The binaries link (a library missing is named here, not as a test's odd failure).
bad=0
for b in "$G/bin/dtraind" "$G/bin/dtrain" "$G/build/dt_test" "$G/bin/libdtrain-cuda.so"; do
  if ldd "$b" | grep -q 'not found'; then
    echo "run.sh: $b does not link:" >&2
    ldd "$b" | grep 'not found' >&2
    bad=1
  fi
done
echo "ldd $G/bin/libdtrain-cuda.so:"
ldd "$G/bin/libdtrain-cuda.so" | sed 's/^/ /'
((bad == 0)) || die "libraries missing (above): add their packages in prepare.sh"

tests=("$G/build/dt_test" gpu_ "$@")
env_run=(env DT_SRC_DIR="$ROOT" DT_BIN_DIR="$GA/bin")
if [[ $mode == dry ]]; then
  echo "would run: ${env_run[*]} ${tests[*]} (log in $OUT/gpu-tests.log)"
  rm -rf "${G:?}/root" # unpacked again there; here it would only swell the carry
  exit 0
fi

# 4. The GPU, then the work; what comes back is under $OUT.
mkdir -p "$OUT"
{
  nvidia-smi || echo "(nvidia-smi failed or is missing)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  # the PyTorch parity tests call /usr/bin/python3; the machine's torch is in the python3 on PATH
  for p in /usr/bin/python3 "$PY"; do
    printf 'torch in %s (%s): ' "$p" "$(command -v "$p" || echo missing)"
    "$p" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null || echo no
  done
} 2>&1 | tee "$OUT/gpu-probe.txt"
if [[ $mode == exec ]]; then
  "${env_run[@]}" "$@"
  exit $?
fi
"${env_run[@]}" "${tests[@]}" 2>&1 | tee "$OUT/gpu-tests.log"
exit "${PIPESTATUS[0]}"
