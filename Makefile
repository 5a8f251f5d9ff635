# dtrain - build, deps, test, asan, demo, bench.
#
#   make            bin/dtraind and bin/dtrain
#   make deps       install the Debian packages the build, tests and demo need (apt-get as root)
#   make test       build, then run every test; the last line is "N passed, N failed, N skipped"
#   make test-faults  the long fault-injection runs (chaos in netns, 20 chief restarts)
#   make test-guard the nn unit tests on the guarded ops table and on the emulated GPU
#   make asan       the same tests under -fsanitize=address,undefined (build in build/asan)
#   make demo       train the Fashion-MNIST CNN on 2 local daemons
#   make demo-text  train an Embedding + LSTM text classifier on Debian's package descriptions
#   make format     clang-format every C file
#   make install    binaries, unit, sysusers.d, env example (PREFIX, DESTDIR); make uninstall
#   make fuzz       libFuzzer targets (clang, ASan + UBSan), one per parser, FUZZ_S=N seconds each
# Options: CUDA=0|1 (default: on when nvcc is found), SANITIZE=address, V=1 (show commands).

VERSION    := 0.4.1
BUILD      ?= build
BIN        ?= bin
SANITIZE   ?=
CUDA_HOME  ?= /usr/local/cuda

ifneq ($(filter-out address,$(SANITIZE)),)
$(error SANITIZE=$(SANITIZE) is not supported: use SANITIZE=address or leave it empty)
endif

# --- feature detection: by tool and header paths, one line each -----------------------------
NVCC := $(shell command -v nvcc 2>/dev/null || { test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc; })
ifeq ($(CUDA),0)
  HAVE_CUDA := 0
else ifeq ($(CUDA),1)
  ifeq ($(NVCC),)
    $(error CUDA=1 but nvcc was not found in PATH or $(CUDA_HOME)/bin)
  endif
  HAVE_CUDA := 1
else ifeq ($(CUDA),)
  HAVE_CUDA := $(if $(NVCC),1,0)
else
  $(error CUDA=$(CUDA) is not supported: use CUDA=0, CUDA=1 or leave it unset)
endif

PKGS := grpc libprotobuf-c libcjson libuv openblas zlib libjpeg libpng
PKG_OK := $(shell pkg-config --exists $(PKGS) 2>/dev/null && echo yes)

CC       ?= cc
CPPFLAGS += -Ilib -I$(BUILD)/gen -Itest -DDT_VERSION=\"$(VERSION)\" -D_GNU_SOURCE
CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -Wall -Wextra -Werror -pthread -fno-strict-aliasing -fno-math-errno
ifneq ($(PKG_OK),)
CPPFLAGS += $(shell pkg-config --cflags $(PKGS))
LDLIBS   += $(shell pkg-config --libs $(PKGS)) -lm -lpthread
endif
ifeq ($(SANITIZE),address)
CFLAGS   += -fsanitize=address,undefined -fno-omit-frame-pointer -O1
LDFLAGS  += -fsanitize=address,undefined
endif
ifeq ($(V),1)
Q :=
else
Q := @
endif

# --- sources -----------------------------------------------------------------------------------
PROTOS     := $(wildcard proto/*.proto)
PROTO_C    := $(patsubst proto/%.proto,$(BUILD)/gen/%.pb-c.c,$(PROTOS))
PROTO_H    := $(PROTO_C:.c=.h)
LIB_SRC    := $(sort $(shell find lib -name '*.c'))
LIB_OBJ    := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRC)) $(patsubst %.c,%.o,$(PROTO_C))
DAEMON_SRC := daemon/dtraind.c
CLI_SRC    := daemon/dtrain.c $(wildcard daemon/cli_*.c)
TEST_SRC   := $(sort $(wildcard test/unit/*.c))
LIBDTRAIN  := $(BUILD)/libdtrain.a
# Generated protobuf-c sources are kept: without this make treats them as intermediate files of
# the pattern rules and deletes them after a clean build, forcing a full rebuild the next time.
.SECONDARY: $(PROTO_C) $(PROTO_H)

# The CUDA backend: a shared object that libdtrain loads with dlopen when a job asks for a GPU
# (lib/nn/gpu.c), so the binaries run without a driver and CPU runs never initialise CUDA. Its
# runtime is linked statically; cuBLAS is found through the rpath (this build's toolkit) or
# LD_LIBRARY_PATH (a wheel's lib folder on a machine without the toolkit).
CUDA_SRC   := $(sort $(wildcard lib/nn/cuda/*.cu))
CUDA_OBJ   := $(patsubst %.cu,$(BUILD)/obj/%.o,$(CUDA_SRC))
CUDA_LIB   := $(BIN)/libdtrain-cuda.so
CUDA_ARCH  ?= -gencode arch=compute_90,code=[sm_90,compute_90]
NVCCFLAGS  ?= -O2 -g
NVCCFLAGS  += -std=c++17 $(CUDA_ARCH) -Ilib -Werror all-warnings \
              -Xcompiler -fPIC,-Wall,-Wextra,-Werror,-fvisibility=hidden
# NCCL (lib/nn/cuda/nccl.cu): the toolkit's copy in $(CUDA_HOME), or NCCL_HOME's include/ and
# lib/ when set (a separate install, or a wheel's site-packages/nvidia/nccl, which has only the
# versioned libnccl.so.2: hence -l:libnccl.so.2). At run time
# libnccl.so.2 comes from the rpath or LD_LIBRARY_PATH (scripts/gpu/run.sh puts the wheel's there).
NCCL_HOME  ?=
ifneq ($(NCCL_HOME),)
  NVCCFLAGS    += -I$(NCCL_HOME)/include
  NCCL_LDFLAGS := -L$(NCCL_HOME)/lib -Xlinker -rpath=$(NCCL_HOME)/lib
endif
ifeq ($(HAVE_CUDA),1)
all: $(CUDA_LIB)
endif

$(BUILD)/obj/%.o: %.cu lib/nn/cuda/internal.cuh lib/nn/cuda/api.h lib/nn/ops.h
	@mkdir -p $(dir $@)
	@echo "  NVCC    $<"
	$(Q)$(NVCC) $(NVCCFLAGS) -c -o $@ $<

$(CUDA_LIB): $(CUDA_OBJ)
	@mkdir -p $(BIN)
	@echo "  LD      $@"
	$(Q)$(NVCC) $(CUDA_ARCH) -shared -o $@ $^ -cudart static $(NCCL_LDFLAGS) -lcublas -Xlinker -l:libnccl.so.2 \
	  -Xlinker -rpath=$(CUDA_HOME)/lib64 -Xlinker --no-undefined

.PHONY: all deps deps-check test test-faults test-guard asan demo demo-text bench format clean features
all: features $(BIN)/dtraind $(BIN)/dtrain $(BUILD)/dt_test

features:
	@if [ -z "$(PKG_OK)" ]; then echo "✗ libraries missing (pkg-config: $(PKGS)): run 'make deps'"; exit 2; fi
	@if [ "$(HAVE_CUDA)" = 1 ]; then echo "✓ CPU build (OpenBLAS); nvcc found ($(NVCC)): the CUDA backend $(CUDA_LIB) is built too ($(CUDA_ARCH))"; \
	 else echo "✓ CPU build (OpenBLAS); no CUDA backend (no nvcc, or CUDA=0)"; fi

$(BUILD)/gen/%.pb-c.c $(BUILD)/gen/%.pb-c.h: proto/%.proto
	@mkdir -p $(BUILD)/gen
	@echo "  PROTOC  $<"
	$(Q)protoc-c --c_out=$(BUILD)/gen -Iproto $<


$(BUILD)/gen/%.pb-c.o: $(BUILD)/gen/%.pb-c.c
	@echo "  CC      $<"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -Wno-unused-parameter -c -o $@ $<

$(BUILD)/obj/%.o: %.c $(PROTO_H)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

# The image resize loops and the batch's uint8 -> float32 scaling are the input pipeline's hot
# path (element-wise over whole rows): vectorised, which -O2's very-cheap cost model declines.
# Element-wise vector code rounds as the scalar code does (nothing is reassociated), so the
# values do not change.
$(BUILD)/obj/lib/data/resize.o $(BUILD)/obj/lib/data/pipeline.o: \
	CFLAGS += -ftree-vectorize -fvect-cost-model=dynamic
# The recurrent cells' sigmoid and tanh over blocks of units (ops_cpu_rnn.c), likewise.
$(BUILD)/obj/lib/nn/ops_cpu_rnn.o: CFLAGS += -ftree-vectorize -fvect-cost-model=dynamic
# The CPU table's element-wise ops and bias sums (an LSTM's bias gradient sums 6,400 rows of
# 256 a step), likewise.
$(BUILD)/obj/lib/nn/ops_cpu.o: CFLAGS += -ftree-vectorize -fvect-cost-model=dynamic

$(LIBDTRAIN): $(LIB_OBJ)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

$(BIN)/dtraind: $(patsubst %.c,$(BUILD)/obj/%.o,$(DAEMON_SRC)) $(LIBDTRAIN)
	@mkdir -p $(BIN)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BIN)/dtrain: $(patsubst %.c,$(BUILD)/obj/%.o,$(CLI_SRC)) $(LIBDTRAIN)
	@mkdir -p $(BIN)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# A stand-in CUDA backend for the tests (lib/nn/ops_guard.c with DT_NN_GUARD_FAKE_GPU): the CPU
# kernels as DTRAIN_FAKE_GPUS devices, loaded through DTRAIN_CUDA_LIB like the real one, so the
# GPU replicas' code runs in CI. Its own copies of the kernels, built position-independent.
FAKEGPU_LIB := $(BUILD)/libdtrain-fakegpu.so
FAKEGPU_SRC := lib/nn/ops_guard.c $(wildcard lib/nn/ops_cpu*.c) lib/core/rng.c
$(FAKEGPU_LIB): $(FAKEGPU_SRC) $(wildcard lib/nn/*.h lib/core/*.h lib/nn/cuda/api.h)
	@echo "  LD      $@"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -fPIC -fvisibility=hidden -DDT_NN_GUARD_FAKE_GPU -shared \
	  -o $@ $(FAKEGPU_SRC) $(LDFLAGS) $(shell pkg-config --libs openblas) -lm -lpthread

# A host emulation of the CUDA backend for the tests: lib/nn/cuda/*.cu (every file: the real entry
# point, binding code and kernels) rewritten by test/cudaemu/cu2cpp.py (the <<<>>> launches) and
# compiled as C++ on the shim headers of test/cudaemu (CUDA runtime, cuBLAS over OpenBLAS, CUB's
# radix sort), so the GPU tests run the real kernels in CI through DTRAIN_CUDA_LIB. Built when
# python3 and g++ exist, without sanitizers (its fibers switch stacks). No contraction into FMA,
# as the CPU code and the kernels' __f*_rn.
EMU_CXX       ?= g++
HAVE_CUDAEMU  := $(shell command -v python3 >/dev/null 2>&1 && command -v $(EMU_CXX) >/dev/null 2>&1 && echo 1)
CUDAEMU_LIB   := $(BUILD)/libdtrain-cudaemu.so
CUDAEMU_HDR   := $(wildcard test/cudaemu/*.h test/cudaemu/cub/*/*.cuh) lib/nn/cuda/internal.cuh \
                 lib/nn/cuda/api.h $(wildcard lib/nn/*.h lib/core/*.h)
CUDAEMU_OBJ   := $(patsubst lib/nn/cuda/%.cu,$(BUILD)/cudaemu/%.o,$(CUDA_SRC)) \
                 $(patsubst test/cudaemu/%.cpp,$(BUILD)/cudaemu/%.o,$(wildcard test/cudaemu/*.cpp))
CUDAEMU_FLAGS := -std=c++17 -O2 -g -fPIC -fvisibility=hidden -ffp-contract=off -fno-math-errno \
                 -Wall -Wextra -Werror -pthread -Itest/cudaemu -Ilib $(shell pkg-config --cflags openblas)
.SECONDARY: $(patsubst lib/nn/cuda/%.cu,$(BUILD)/cudaemu/%.cpp,$(CUDA_SRC))
$(BUILD)/cudaemu/%.cpp: lib/nn/cuda/%.cu test/cudaemu/cu2cpp.py lib/nn/cuda/internal.cuh
	@mkdir -p $(BUILD)/cudaemu
	$(Q)python3 test/cudaemu/cu2cpp.py $< $@ lib/nn/cuda/internal.cuh
$(BUILD)/cudaemu/%.o: $(BUILD)/cudaemu/%.cpp $(CUDAEMU_HDR)
	@echo "  CXX     $@"
	$(Q)$(EMU_CXX) $(CUDAEMU_FLAGS) -c -o $@ $<
$(BUILD)/cudaemu/emu_%.o: test/cudaemu/emu_%.cpp $(CUDAEMU_HDR)
	@mkdir -p $(BUILD)/cudaemu
	@echo "  CXX     $@"
	$(Q)$(EMU_CXX) $(CUDAEMU_FLAGS) -c -o $@ $<
$(CUDAEMU_LIB): $(CUDAEMU_OBJ)
	@echo "  LD      $@"
	$(Q)$(EMU_CXX) -shared -pthread -o $@ $^ $(shell pkg-config --libs openblas) -lm \
	  -Wl,--no-undefined

# Every DT_TEST(name) / DT_TEST_TIMEOUT(name, s) in test/unit/*.c becomes one runner entry.
$(BUILD)/gen/test_list.h: $(TEST_SRC) Makefile
	@mkdir -p $(BUILD)/gen
	$(Q)cat /dev/null $(TEST_SRC) | sed -n \
	  -e 's/^DT_TEST(\([A-Za-z0-9_]*\)).*/DT_TEST_ENTRY(\1, 60)/p' \
	  -e 's/^DT_TEST_TIMEOUT(\([A-Za-z0-9_]*\), *\([0-9]*\)).*/DT_TEST_ENTRY(\1, \2)/p' > $@.tmp
	$(Q)cmp -s $@.tmp $@ || mv $@.tmp $@; rm -f $@.tmp

$(BUILD)/obj/test/runner.o: $(BUILD)/gen/test_list.h

$(BUILD)/dt_test: $(patsubst %.c,$(BUILD)/obj/%.o,test/runner.c $(TEST_SRC)) $(LIBDTRAIN) | $(FAKEGPU_LIB) $(if $(HAVE_CUDAEMU),$(CUDAEMU_LIB))
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# --- deps, tests, demo -------------------------------------------------------------------------
deps:
	@bash scripts/deps.sh install

deps-check:
	@bash scripts/deps.sh check || bash scripts/deps.sh install

test: deps-check
	@$(MAKE) --no-print-directory all
	@DT_SRC_DIR=$(CURDIR) DT_BIN_DIR=$(CURDIR)/$(BIN) $(BUILD)/dt_test $(TEST_ARGS)

# The long fault-injection runs (chaos in network namespaces, 20 chief restarts): CI runs them
# after `make test`.
test-faults: deps-check
	@$(MAKE) --no-print-directory all
	@DT_SRC_DIR=$(CURDIR) DT_BIN_DIR=$(CURDIR)/$(BIN) $(BUILD)/dt_test --suite faults $(TEST_ARGS)

# The guard faults on every host access to model memory, at two mprotect calls a kernel: the
# nn tests take 2-3 times as long, so they run apart from make test (CI runs both).
test-guard: deps-check
	@$(MAKE) --no-print-directory all
	@DT_SRC_DIR=$(CURDIR) DT_BIN_DIR=$(CURDIR)/$(BIN) $(BUILD)/dt_test --suite guard $(TEST_ARGS)

asan: deps-check
	@$(MAKE) --no-print-directory SANITIZE=address BUILD=build/asan BIN=build/asan/bin all
	@DT_SRC_DIR=$(CURDIR) DT_BIN_DIR=$(CURDIR)/build/asan/bin DT_TEST_TIMEOUT_MULT=3 \
	  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  build/asan/dt_test $(TEST_ARGS)

demo: deps-check
	@$(MAKE) --no-print-directory all
	@bash scripts/demo.sh

demo-text: deps-check
	@$(MAKE) --no-print-directory all
	@bash scripts/demo-text.sh

format:
	clang-format -i $$(find lib daemon test -name '*.[ch]')

clean:
	rm -rf build bin

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

include fuzz/fuzz.mk
include mk/install.mk
