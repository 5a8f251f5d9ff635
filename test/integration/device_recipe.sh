#!/usr/bin/env bash
# timeout: 60
# scripts/gpu/run.sh's library path, on a fake GPU machine's layout: a .gpu/ whose CUDA backend
# links against two libraries that only fake nvidia wheels hold (found through python3's
# sys.path: one in nvidia/cu13/lib, a namespace package with no __init__.py; one in a folder no
# module names, beside a libcublas.so.13, as the search for the sonames finds it) and a "BLAS" that
# only a .deb holds, in Debian's openblas-pthread/ folder that an alternatives link normally
# reaches. --dry-run unpacks the .deb under .gpu/root (not /), puts the three folders on the path,
# wheels first, finds every library and exits 0; without the wheels it names the missing
# libraries and exits 3; a bad option exits 2, a .gpu/ without dt_test 3.
source "$(dirname "$0")/lib.sh"
dt_require_cmd cc
dt_require_cmd dpkg-deb
PY=/usr/bin/python3
[[ -x $PY ]] || dt_skip "no $PY"

t=$DT_TEST_TMP
g=$t/gpu
mkdir -p "$g/bin" "$g/build" "$g/debs" "$t/wheel/nvidia/cu13/lib" "$t/wheel/nvidia/deep/x/lib" \
  "$t/pkg/DEBIAN" "$t/pkg/usr/lib/x86_64-linux-gnu/openblas-pthread"
# lib NAME SONAME DIR: a shared library defining int NAME(void)
lib() {
  echo "int $1(void) { return 1; }" >"$t/$1.c"
  cc -shared -fPIC -Wl,-soname,"$2" -o "$3/$2" "$t/$1.c" || dt_fail "cc $2"
}
lib fake_cu13 libdtfake_cu13.so.1 "$t/wheel/nvidia/cu13/lib"
lib fake_deep libdtfake_deep.so.1 "$t/wheel/nvidia/deep/x/lib"
lib fake_cublas libcublas.so.13 "$t/wheel/nvidia/deep/x/lib"
lib fake_blas libfakeblas.so.0 "$t/pkg/usr/lib/x86_64-linux-gnu/openblas-pthread"
printf 'Package: libfakeblas0\nVersion: 1.0\nArchitecture: amd64\nMaintainer: dtrain tests <t@example.org>\nDescription: a stand-in\n' \
  >"$t/pkg/DEBIAN/control"
dpkg-deb --build "$t/pkg" "$g/debs/libfakeblas0_1.0_amd64.deb" >/dev/null || dt_fail "dpkg-deb --build"
echo 'int fake_cu13(void); int fake_deep(void); int fake_blas(void);
int dt_backend(void) { return fake_cu13() + fake_deep() + fake_blas(); }' >"$t/backend.c"
cc -shared -fPIC -o "$g/bin/libdtrain-cuda.so" "$t/backend.c" "$t/wheel/nvidia/cu13/lib/libdtfake_cu13.so.1" \
  "$t/wheel/nvidia/deep/x/lib/libdtfake_deep.so.1" \
  "$t/pkg/usr/lib/x86_64-linux-gnu/openblas-pthread/libfakeblas.so.0" || dt_fail "cc the backend"
for b in dtraind dtrain; do ln -s "$DT_BIN_DIR/$b" "$g/bin/$b"; done
ln -s "$DT_BIN_DIR/dtraind" "$g/build/dt_test" # links as the runner does; never run here

run() { env DT_GPU_DIR="$g" DT_GPU_PYTHON="$PY" OUT="$t/out" bash "$DT_SRC_DIR/scripts/gpu/run.sh" "$@"; }

rc=0
PYTHONPATH=$t/wheel run --dry-run >"$t/dry.out" 2>&1 || rc=$?
cat "$t/dry.out"
dt_assert_eq "$rc" 0 "run.sh --dry-run with the wheel"
dt_assert_contains "$t/dry.out" "^unpacked 1 package" "the .deb is unpacked"
[[ ! -e $g/root ]] || dt_fail "--dry-run left $g/root to swell the carry"
dt_assert_contains "$t/dry.out" "^  $t/wheel/nvidia/cu13/lib\$" "the cu13 wheel's lib folder on the path"
dt_assert_contains "$t/dry.out" "^  $t/wheel/nvidia/deep/x/lib\$" "cuBLAS's folder on the path"
dt_assert_contains "$t/dry.out" "^  $g/root/usr/lib/x86_64-linux-gnu/openblas-pthread\$" "the .deb's lib folder on the path"
dt_assert_contains "$t/dry.out" "libdtfake_cu13.so.1 => $t/wheel/nvidia/cu13/lib/libdtfake_cu13.so.1" "the backend finds the cu13 wheel's library"
dt_assert_contains "$t/dry.out" "libdtfake_deep.so.1 => $t/wheel/nvidia/deep/x/lib/libdtfake_deep.so.1" "the backend finds the library beside cuBLAS"
dt_assert_contains "$t/dry.out" "libfakeblas.so.0 => $g/root/usr/lib/x86_64-linux-gnu/openblas-pthread/libfakeblas.so.0" "the backend finds the .deb's library"
dt_assert_contains "$t/dry.out" "would run: env DT_SRC_DIR=.* DT_BIN_DIR=$g/bin $g/build/dt_test gpu_ \\(log in $t/out/" "the test command"
# the wheel's folder comes first: the machine's own CUDA libraries never shadow it
first=$(grep -A1 '^LD_LIBRARY_PATH:' "$t/dry.out" | tail -n 1)
dt_assert_eq "$first" "  $t/wheel/nvidia/cu13/lib" "the first folder on the path"

rc=0
run --dry-run >"$t/nowheel.out" 2>&1 || rc=$?
cat "$t/nowheel.out"
dt_assert_eq "$rc" 3 "run.sh --dry-run without the wheel"
dt_assert_contains "$t/nowheel.out" "libdtrain-cuda.so does not link" "the refusal names the backend"
dt_assert_contains "$t/nowheel.out" "libdtfake_cu13.so.1 => not found" "and the missing libraries"
dt_assert_contains "$t/nowheel.out" "libdtfake_deep.so.1 => not found" "and the missing libraries"

rc=0
run --bogus >"$t/bad.out" 2>&1 || rc=$?
dt_assert_eq "$rc" 2 "run.sh --bogus"
rm "$g/build/dt_test"
rc=0
run --dry-run >"$t/empty.out" 2>&1 || rc=$?
dt_assert_eq "$rc" 3 "run.sh with no dt_test in .gpu"
dt_assert_contains "$t/empty.out" "prepare.sh" "it says to run prepare.sh"
echo "gpu recipe OK"
