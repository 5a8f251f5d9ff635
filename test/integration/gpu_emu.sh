#!/usr/bin/env bash
# timeout: 300
# The real CUDA kernels in CI: every gpu_ unit test on build/libdtrain-cudaemu.so, the backend
# built from lib/nn/cuda/*.cu (all of them: ctx.cu's binding and entry point, gemm.cu's cuBLAS
# call, every kernel) on the host emulator of test/cudaemu. None may skip: the count of "ok"
# lines must equal the number of gpu_ tests (but for gpu_nccl_new_says_why, the no-GPU path's
# test, which skips where there is a GPU), and the loader's line must name the emulated device.
# The NCCL tests run again on 4 emulated GPUs (one clique member each), the GPU-replica fits on 2.
# Skips (7) only when the build made no emulator (no python3 or g++).
source "$(dirname "$0")/lib.sh"

emu=$DT_SRC_DIR/build/libdtrain-cudaemu.so
[[ -f $emu ]] || dt_skip "no $emu (the build makes it only where python3 and g++ exist)"
# the backend's tests (gpu_*): service_gpu_* run on the stand-in library whatever is set here
# (but gpu_hier_, whose hosts need 2 GPUs each: it runs below on 2 emulated devices)
mapfile -t names < <("$DT_SRC_DIR/build/dt_test" --unit --list gpu_ | grep '^gpu_' | grep -v '^gpu_hier_')
tests=${#names[@]}
[[ $tests -gt 0 ]] || dt_fail "no gpu_ unit tests listed"

rc=0
DTRAIN_CUDA_LIB=$emu DTRAIN_EMU_GPUS=1 "$DT_SRC_DIR/build/dt_test" -j 1 --unit "${names[@]}" \
  >"$DT_TEST_TMP/gpu.log" 2>&1 || rc=$?
cat "$DT_TEST_TMP/gpu.log"
dt_assert_eq "$rc" 0 "the gpu_ tests on the emulator"
# the only skip allowed is the test of the no-GPU path, which skips where a GPU is visible
ok=$(grep -c '^ok ' "$DT_TEST_TMP/gpu.log" || true)
gpu_here=$(grep -c '^skip .*a GPU is here' "$DT_TEST_TMP/gpu.log" || true)
dt_assert_eq "$gpu_here" 1 "gpu_nccl_new_says_why's skip (a GPU is here)"
dt_assert_eq "$((ok + gpu_here))" "$tests" "gpu_ tests passed on the emulator (none skipped)"

# NCCL cliques over distinct emulated devices (above: several ranks on /gpu:0)
rc=0
DTRAIN_CUDA_LIB=$emu DTRAIN_EMU_GPUS=4 "$DT_SRC_DIR/build/dt_test" -j 1 --unit gpu_nccl_ \
  >"$DT_TEST_TMP/nccl.log" 2>&1 || rc=$?
cat "$DT_TEST_TMP/nccl.log"
dt_assert_eq "$rc" 0 "the gpu_nccl_ tests on 4 emulated GPUs"
dt_assert_eq "$(grep -c '^ok ' "$DT_TEST_TMP/nccl.log" || true)" 4 "gpu_nccl_ tests passed on 4 GPUs"
# several GPU replicas of one fit, graphed, on distinct emulated devices (above: on /gpu:0), and
# two hosts of 2 GPUs each (NCCL inside each, the host rings between them)
rc=0
DTRAIN_CUDA_LIB=$emu DTRAIN_EMU_GPUS=2 "$DT_SRC_DIR/build/dt_test" -j 1 --unit gpu_clique_ \
  gpu_hier_ >"$DT_TEST_TMP/clique.log" 2>&1 || rc=$?
cat "$DT_TEST_TMP/clique.log"
dt_assert_eq "$rc" 0 "the gpu_clique_ and gpu_hier_ tests on 2 emulated GPUs"
dt_assert_eq "$(grep -c '^ok ' "$DT_TEST_TMP/clique.log" || true)" 2 \
  "gpu_clique_ and gpu_hier_ tests passed on 2 GPUs"
# the loader's test saw the emulated device (not a skip, not a real GPU); two devices with
# DTRAIN_EMU_GPUS=2
DTRAIN_CUDA_LIB=$emu DTRAIN_EMU_GPUS=2 "$DT_SRC_DIR/build/dt_test" --run-one gpu_loader_says_why \
  >"$DT_TEST_TMP/loader.log" 2>&1 || dt_fail "gpu_loader_says_why with two emulated GPUs"
cat "$DT_TEST_TMP/loader.log"
dt_assert_contains "$DT_TEST_TMP/loader.log" "^2 GPU\\(s\\); /gpu:0 dtrain CUDA emulator" \
  "the loader test's device line"
