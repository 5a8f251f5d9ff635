#!/usr/bin/env bash
# timeout: 400
# The nn gradient and PyTorch-parity tests on the emulated GPU: DTRAIN_OPS=/gpu:0 makes the
# default ops table the CUDA backend's (the real kernels of lib/nn/cuda on the host emulator,
# build/libdtrain-cudaemu.so), so every layer's forward and backward, the losses and the
# optimizers run through the GPU code against finite differences and float64 PyTorch. All must
# pass; the only skips allowed are the parity tests' own when python3 has no torch.
# Skips (7) only when the build made no emulator (no python3 or g++).
source "$(dirname "$0")/lib.sh"

emu=$DT_SRC_DIR/build/libdtrain-cudaemu.so
[[ -f $emu ]] || dt_skip "no $emu (the build makes it only where python3 and g++ exist)"
pats=(nn_parity nn_grad)
tests=$("$DT_SRC_DIR/build/dt_test" --unit --list "${pats[@]}" | wc -l)
[[ $tests -gt 0 ]] || dt_fail "no nn_parity / nn_grad unit tests listed"

rc=0
DTRAIN_CUDA_LIB=$emu DTRAIN_EMU_GPUS=1 DTRAIN_OPS=/gpu:0 \
  "$DT_SRC_DIR/build/dt_test" -j 1 --timeout-mult 3 --unit "${pats[@]}" \
  >"$DT_TEST_TMP/nn.log" 2>&1 || rc=$?
cat "$DT_TEST_TMP/nn.log"
dt_assert_eq "$rc" 0 "the nn tests on the emulated GPU"
ok=$(grep -c '^ok ' "$DT_TEST_TMP/nn.log" || true)
no_torch=$(grep -Ec '^skip .*(has no torch|python3\))' "$DT_TEST_TMP/nn.log" || true)
[[ $ok -gt 0 ]] || dt_fail "no nn test passed on the emulated GPU"
dt_assert_eq "$((ok + no_torch))" "$tests" "nn tests passed on the emulated GPU (skips: no torch only)"
