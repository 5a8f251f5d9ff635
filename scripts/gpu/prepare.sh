#!/usr/bin/env bash
# prepare.sh - here, on the Debian machine: build, then collect into .gpu/ what the GPU machine
# needs to run this build's binaries and tests (scripts/gpu/README.md). That machine has CUDA's
# driver, nvcc and PyTorch with cuBLAS and NCCL as Python wheels, none of Debian's libraries and
# no network: it gets Debian's runtime packages as .debs that run.sh unpacks there.
#
#   scripts/gpu/prepare.sh [--strip]
#
#   .gpu/bin/{dtraind,dtrain,libdtrain-cuda.so}  the binaries (libdtrain-cuda.so: nvcc must be here)
#   .gpu/build/dt_test                           the test runner (it finds the backend in ../bin)
#   .gpu/debs/*.deb                              the runtime packages ldd names, but the base system's
#   .gpu/MANIFEST                                what was collected, with sizes
#
# --strip drops the binaries' debug sections, when the carry (64 MiB with the working tree) is
# short. .gpu/ is added to .git/info/exclude, so git ignores it; name it in the device call's carry.
# The test scripts and reference data are tracked files: they travel with the working tree.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
G=.gpu
MAX_MIB=60 # what the carry may take, leaving the working tree its room in 64 MiB
strip=0
for a in "$@"; do
  case $a in
  --strip) strip=1 ;;
  -h | --help)
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "prepare.sh: unknown argument '$a' (see --help)" >&2
    exit 2
    ;;
  esac
done
die() {
  echo "prepare.sh: $*" >&2
  exit 1
}

exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qxF "/$G/" "$exclude" 2>/dev/null || echo "/$G/" >>"$exclude"

make -j2
[[ -f bin/libdtrain-cuda.so ]] ||
  die "no bin/libdtrain-cuda.so: this build found no nvcc (install CUDA's toolkit here, or CUDA_HOME=...)"

rm -rf "${G:?}/bin" "$G/build" "$G/debs" "$G/root" "$G/MANIFEST"
mkdir -p "$G/bin" "$G/build" "$G/debs"
cp bin/dtraind bin/dtrain bin/libdtrain-cuda.so "$G/bin/"
cp build/dt_test "$G/build/"
if ((strip)); then
  strip --strip-debug "$G/bin/dtraind" "$G/bin/dtrain" "$G/bin/libdtrain-cuda.so" "$G/build/dt_test"
fi

# The packages that own what the binaries load. Left out: the C and C++ runtimes and zlib, which
# every image has in a newer version (an older copy first on LD_LIBRARY_PATH would be loaded by
# PyTorch too, which the tests run), and CUDA's own libraries (the machine's wheels have them).
BASE="libc6 libgcc-s1 libstdc++6 zlib1g"
declare -A pkgs=()
for p in libgrpc29 libprotobuf-c1 libcjson1 libuv1 libopenblas0-pthread; do pkgs[$p]=1; done
missing=$(ldd bin/dtraind bin/dtrain build/dt_test bin/libdtrain-cuda.so | grep 'not found' || true)
[[ -z $missing ]] || die "libraries not found here: $missing"
while read -r lib; do
  owner=""
  for path in "$lib" "$(readlink -f "$lib")" "/usr$lib"; do
    owner=$(dpkg -S "$path" 2>/dev/null | head -n 1 | cut -d: -f1) && [[ -n $owner ]] && break
  done
  if [[ -z $owner ]]; then
    echo "  (not from a package, not carried: $lib)"
    continue
  fi
  [[ " $BASE " == *" $owner "* ]] || pkgs[$owner]=1
done < <(ldd bin/dtraind bin/dtrain build/dt_test bin/libdtrain-cuda.so | awk '/=> \//{print $3}' | sort -u)

mapfile -t names < <(printf '%s\n' "${!pkgs[@]}" | sort)
echo "runtime packages: ${names[*]}"
(cd "$G/debs" && apt-get download "${names[@]}") >"$G/download.log" 2>&1 ||
  die "apt-get download failed (network? 'apt-get update'?): $(tail -n 3 "$G/download.log")"
rm -f "$G/download.log"

{
  echo "# scripts/gpu/prepare.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- lib daemon test || echo ' + local changes')"
  (cd "$G" && find bin build debs -type f -printf '%s\t%p\n' | sort -k2)
} >"$G/MANIFEST"
total=$(du -sm "$G" | cut -f1)
cat "$G/MANIFEST"
echo "$G: $total MiB (keep it under $MAX_MIB: the working tree takes the rest of the 64 MiB carry)"
((total <= MAX_MIB)) || die "$G is $total MiB, over $MAX_MIB: try --strip"
echo "next: the device call, from the repo root, with carry [\"$G\"]: bash scripts/gpu/run.sh [PATTERN...]"
