# uvlm build. `make` builds ./uvlm; see README.md for the other targets.
#   BUILD=dir    where objects go (default build/, build-check/ for `make check`)
#   BIN=path     where the binary goes (default ./uvlm)
BUILD    ?= build
BIN      ?= uvlm
CC       ?= cc
OPTFLAGS ?= -O2 -march=native -g
WARNFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-unused-parameter
SANFLAGS ?=
# Debian's interpreter: python3-pytest installs there (a pyenv python3 earlier in PATH lacks it).
PYTHON   ?= /usr/bin/python3
CFLAGS   := $(OPTFLAGS) $(SANFLAGS) $(WARNFLAGS) -Isrc -MMD -MP
LDFLAGS  += $(SANFLAGS) -pthread

include deps.mk
CFLAGS += $(DEPS_CFLAGS)

# Every .c under src/ is part of the server; src/main.c holds main() and is left out of the
# test runner, whose main() is test/runner.c. Tests are test/**/*_test.c, mirroring src/.
LIB_SRCS  := $(sort $(filter-out src/main.c,$(shell find src -name '*.c')))
TEST_SRCS := $(sort $(shell find test -name '*_test.c')) test/runner.c
BENCH_SRCS := $(sort $(shell find test/bench -name '*.c' 2>/dev/null))
LIB_OBJS  := $(patsubst %.c,$(BUILD)/%.o,$(LIB_SRCS)) $(LLHTTP_OBJS)
TEST_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(TEST_SRCS))
RUNNER    := $(BUILD)/test-runner
$(TEST_OBJS): CFLAGS += -Itest
BENCH_BINS := $(patsubst test/bench/%.c,$(BUILD)/bench/%,$(BENCH_SRCS))

.PHONY: all test unit e2e check bench fuzz flags-table clean layers
all: $(BIN)

$(BIN): $(LIB_OBJS) $(BUILD)/src/main.o
	$(CC) $(LDFLAGS) -o $@ $^ $(DEPS_LIBS)

$(RUNNER): $(LIB_OBJS) $(TEST_OBJS)
	$(CC) $(LDFLAGS) -o $@ $^ $(DEPS_LIBS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# The chat page's files (src/api/webui.h) as C arrays in a header only src/api/webui.c includes.
WEBUI_FILES := src/api/webui.html src/api/webui.css src/api/webui.js
$(BUILD)/gen/api/webui_assets.h: $(WEBUI_FILES) scripts/embed
	@mkdir -p $(dir $@)
	scripts/embed $(WEBUI_FILES) > $@.tmp && mv $@.tmp $@
$(BUILD)/src/api/webui.o: $(BUILD)/gen/api/webui_assets.h
$(BUILD)/src/api/webui.o: CFLAGS += -I$(BUILD)/gen

# make test: C unit + golden tests, then end-to-end tests against the real binary, one after the
# other even under -j, so the e2e servers' timing checks never share the cores with golden runs.
test:
	$(MAKE) unit
	$(MAKE) e2e
# the benchmarks are built too, so that a change that breaks one fails here, not at `make bench`
unit: layers $(RUNNER) $(BIN) $(BENCH_BINS)
	$(RUNNER)
# The one-way layers of src/ (scripts/check-layers), on the includes and the built objects.
layers: $(LIB_OBJS) $(BUILD)/src/main.o
	scripts/check-layers $(BUILD)
e2e: $(BIN)
	UVLM_BIN=$(abspath $(BIN)) $(PYTHON) -m pytest -q test/e2e

# make check: the same tests on an ASan + UBSan build.
check:
	$(MAKE) BUILD=build-check BIN=build-check/uvlm \
	  OPTFLAGS="-O1 -g -march=native -fno-omit-frame-pointer" \
	  SANFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined" test

bench: $(BIN) $(BENCH_BINS)
	scripts/bench

# Benchmark programs: test/bench/NAME.c -> build/bench/NAME, linked with the server's objects.
$(BUILD)/bench/%: test/bench/%.c $(LIB_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.c %.o,$^) $(DEPS_LIBS)

fuzz:
	$(MAKE) -f scripts/fuzz.mk

# README.md's flag table is `uvlm --help-markdown` (test/e2e/test_docs.py fails when it differs).
flags-table: $(BIN)
	scripts/flags-table $(abspath $(BIN))

clean:
	rm -rf build build-check build-fuzz $(BIN)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
