# fuzz/fuzz.mk - `make fuzz [FUZZ_S=N]`: one libFuzzer target per parser, built with clang and
# ASan + UBSan (float-cast-overflow on, every UBSan report fatal), each run N seconds.
#
#   make fuzz               build every fuzz/fuzz_<name>.c and run each for FUZZ_S seconds (60)
#   make fuzz FUZZ_S=600    the long run; FUZZ_TARGETS="csv idx" runs only those
#   make fuzz-build         build only: build/fuzz/<name>, run one input with build/fuzz/<name> FILE
#
# The library is compiled again with clang into build/fuzz/obj (the gcc build is untouched). Each
# target's corpus is build/fuzz/corpus/<name>, seeded from fuzz/corpus/<name>; a crash, leak,
# timeout or sanitizer report is saved under build/fuzz/findings/<name>/ and fails the run.
# fuzz/run.sh runs the targets (2 at a time) and prints one line per target:
#   fuzz <name>: <execs> execs, <cov> coverage, <n> findings

FUZZ_S       ?= 60
FUZZ_TARGETS ?=
FUZZ_CC      ?= clang
FUZZ_DIR     := $(BUILD)/fuzz
FUZZ_SAN     := -fsanitize=address,undefined -fsanitize=float-cast-overflow \
                -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS  := -std=c11 -g -O1 -Wall -Wextra -Werror -pthread -fno-strict-aliasing \
                -fno-math-errno $(FUZZ_SAN)
FUZZ_SRC     := $(sort $(wildcard fuzz/fuzz_*.c))
FUZZ_NAMES   := $(patsubst fuzz/fuzz_%.c,%,$(FUZZ_SRC))
FUZZ_BINS    := $(patsubst %,$(FUZZ_DIR)/%,$(FUZZ_NAMES))
FUZZ_LIB_OBJ := $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(LIB_SRC) $(PROTO_C))
FUZZ_LIB     := $(FUZZ_DIR)/libdtrain-fuzz.a
FUZZ_COMMON  := $(FUZZ_DIR)/obj/fuzz/common.o

.PHONY: fuzz fuzz-build

fuzz: deps-check
	@$(MAKE) --no-print-directory fuzz-build
	@FUZZ_DIR=$(FUZZ_DIR) bash fuzz/run.sh $(FUZZ_S) $(or $(FUZZ_TARGETS),$(FUZZ_NAMES))

fuzz-build: $(FUZZ_BINS)

# Library and generated sources: -fsanitize=fuzzer-no-link instruments them for coverage.
$(FUZZ_DIR)/obj/%.o: %.c $(PROTO_H)
	@mkdir -p $(dir $@)
	@echo "  CLANG   $<"
	$(Q)$(FUZZ_CC) $(CPPFLAGS) $(FUZZ_CFLAGS) $(FUZZ_EXTRA) -fsanitize=fuzzer-no-link -MMD -MP \
	  -c -o $@ $<

# protoc-c's output has unused parameters (as in the gcc build).
$(FUZZ_DIR)/obj/$(BUILD)/gen/%.o: FUZZ_EXTRA := -Wno-unused-parameter

$(FUZZ_LIB): $(FUZZ_LIB_OBJ)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

$(FUZZ_BINS): $(FUZZ_DIR)/%: $(FUZZ_DIR)/obj/fuzz/fuzz_%.o $(FUZZ_COMMON) $(FUZZ_LIB)
	@echo "  LD      $@"
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)

-include $(shell find $(FUZZ_DIR)/obj -name '*.d' 2>/dev/null)
