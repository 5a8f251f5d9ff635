#!/usr/bin/env bash
# timeout: 900
# Every nn_ and train_ unit test on the emulated GPU (make test-guard; make test runs the
# gradient and parity subset as gpu_emu_nn): DTRAIN_OPS=/gpu:0 makes the default ops table the
# CUDA backend's, here the real kernels of lib/nn/cuda on the host emulator
# (build/libdtrain-cudaemu.so), so every layer, loss, optimizer, schedule, callback and the
# trainer's fit with its collectives, checkpoints and resume run through the GPU code and must
# give what they give on the CPU. Skips allowed: the tests' own (no torch, no real GPU). Skips
# (7) only when the build made no emulator (no python3 or g++). About 140 s on 2 cores.
source "$(dirname "$0")/../integration/lib.sh"

emu=$DT_SRC_DIR/build/libdtrain-cudaemu.so
[[ -f $emu ]] || dt_skip "no $emu (the build makes it only where python3 and g++ exist)"
pats=(nn_ train_)
tests=$("$DT_SRC_DIR/build/dt_test" --unit --list "${pats[@]}" | wc -l)
((tests > 150)) || dt_fail "only $tests nn_/train_ unit tests listed"

rc=0
TMPDIR=$DT_TEST_TMP DTRAIN_CUDA_LIB=$emu DTRAIN_EMU_GPUS=1 DTRAIN_OPS=/gpu:0 \
  "$DT_SRC_DIR/build/dt_test" -j 2 --timeout-mult 4 --unit "${pats[@]}" \
  >"$DT_TEST_TMP/nn.log" 2>&1 || rc=$?
tail -30 "$DT_TEST_TMP/nn.log"
dt_assert_eq "$rc" 0 "the nn_ and train_ unit tests on the emulated GPU"
ok=$(grep -c '^ok ' "$DT_TEST_TMP/nn.log" || true)
((ok > 150)) || dt_fail "only $ok of $tests tests passed on the emulated GPU"
echo "$ok of $tests nn_/train_ unit tests passed on the emulated GPU"
