# fuzz.mk: libFuzzer targets (clang, ASan + UBSan) in build-fuzz/. Run from the repository root:
#   make fuzz                      build every target and run each for FUZZ_SECONDS (default 60)
#   make fuzz FUZZ_SECONDS=600     longer runs
#   make fuzz FUZZ_TARGETS=gguf    one target
#   make -f scripts/fuzz.mk build  only build
# Each target starts from its committed seed corpus test/fuzz/corpus/NAME/ and keeps what it finds
# in build-fuzz/corpus/NAME/; crashes are written as build-fuzz/crash-* (reproduce with
# build-fuzz/fuzz-NAME build-fuzz/crash-...). The tokenizer target needs ../shared/vocab.
FUZZ_SECONDS ?= 60
FUZZ_BUILD   ?= build-fuzz
FUZZ_CC      ?= clang
FUZZ_FLAGS   := -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS  := $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror \
                -Wno-unused-parameter -Isrc

# The layers the targets exercise: no libuv, jansson or BLAS needed.
FUZZ_SRCS    := $(sort $(wildcard src/common/*.c src/gguf/*.c src/tokenizer/*.c))
FUZZ_OBJS    := $(patsubst %.c,$(FUZZ_BUILD)/%.o,$(FUZZ_SRCS))
FUZZ_TARGETS ?= gguf tokenizer
FUZZ_MAXLEN_gguf      := 65536
FUZZ_MAXLEN_tokenizer := 8192

SHELL := /bin/bash
.PHONY: run build
run: build
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$t; \
	  log=$(FUZZ_BUILD)/fuzz-$$t.log; \
	  maxlen=$$(if [ $$t = gguf ]; then echo $(FUZZ_MAXLEN_gguf); else echo $(FUZZ_MAXLEN_tokenizer); fi); \
	  echo "== fuzz-$$t for $(FUZZ_SECONDS)s (log: $$log)"; \
	  if ! $(FUZZ_BUILD)/fuzz-$$t -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=4096 -max_len=$$maxlen \
	       -artifact_prefix=$(FUZZ_BUILD)/ -print_final_stats=1 \
	       $(FUZZ_BUILD)/corpus/$$t test/fuzz/corpus/$$t >$$log 2>&1; then \
	    tail -40 $$log; echo "!! fuzz-$$t failed: input saved as $(FUZZ_BUILD)/crash-*"; exit 1; \
	  fi; \
	  grep -E 'stat::number_of_executed_units|stat::peak_rss_mb|^#[0-9]+ +DONE' $$log; \
	done

build: $(patsubst %,$(FUZZ_BUILD)/fuzz-%,$(FUZZ_TARGETS))

$(FUZZ_BUILD)/fuzz-%: test/fuzz/%_fuzz.c $(FUZZ_OBJS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ -lm

$(FUZZ_BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@

-include $(shell find $(FUZZ_BUILD) -name '*.d' 2>/dev/null)
