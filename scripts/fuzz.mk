# fuzz.mk: libFuzzer targets (clang, ASan + UBSan) in build-fuzz/. Run from the repository root:
#   make fuzz                          build every target and run each for FUZZ_SECONDS (default 60)
#   make fuzz FUZZ_SECONDS=600         longer runs
#   make fuzz FUZZ_TARGETS=gguf        one target (http api gguf tokenizer sampler jinja grammar json_schema)
#   make fuzz FUZZ_RUNS=10000000       stop each target after this many executions instead
#   make fuzz FUZZ_JOBS=1              one target at a time (default: one per core)
#   make -f scripts/fuzz.mk build      only build
# Targets (test/fuzz/NAME_fuzz.c):
#   http       the HTTP request parser (src/net/parse.c over llhttp), reads cut at every size
#   api        JSON request parsing/validation of every endpoint + response rendering + stop strings
#   gguf       the GGUF reader and the tokenizer loader behind it
#   tokenizer  encode/decode/streaming detokenizer on the shared vocabularies (needs ../shared/vocab)
#   sampler    the sampler chain over arbitrary logits, parameters, biases and penalty windows
#   jinja      the Jinja engine and the chat-template layer: template text, NUL, JSON variables
#   grammar    the GBNF parser and matcher: masks against token-by-token acceptance
#   json_schema  JSON Schema -> GBNF: translations compile, complete generations parse as JSON
# Each target starts from its committed seed corpus test/fuzz/corpus/NAME/ (plus the regression
# inputs in test/fuzz/regress/NAME/) and keeps what it finds in build-fuzz/corpus/NAME/. A crash is
# written as build-fuzz/crash-*: reproduce with build-fuzz/fuzz-NAME FILE, fix, then commit the file
# to test/fuzz/regress/NAME/ where `make test` replays it (test/fuzz/replay_test.c).
# scripts/fuzz-run runs them and ends with one line per target: executions, seconds, and the result.
FUZZ_SECONDS ?= 60
FUZZ_RUNS    ?= -1
FUZZ_JOBS    ?= $(shell nproc)
FUZZ_BUILD   ?= build-fuzz
FUZZ_CC      ?= clang
FUZZ_FLAGS   := -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
LLHTTP_DIR   := /usr/share/llhttp
LLHTTP_INC   := /usr/share/include/llhttp
FUZZ_CFLAGS  := $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror \
                -Wno-unused-parameter -Isrc -I$(LLHTTP_INC)

FUZZ_TARGETS ?= http api gguf tokenizer sampler jinja grammar json_schema

# What each target links: only the layers it exercises (no libuv, no BLAS).
FUZZ_SRCS_gguf      := src/common/err.c src/common/hugemem.c $(sort $(wildcard src/gguf/*.c src/tokenizer/*.c))
FUZZ_SRCS_tokenizer := $(FUZZ_SRCS_gguf)
FUZZ_SRCS_http      := src/common/err.c src/net/parse.c src/api/http.c src/api/errors.c
FUZZ_SRCS_api       := src/common/err.c src/common/strbuf.c src/sampler/grammar.c $(addprefix src/api/,params.c render.c \
                       chat_json.c chat_template.c errors.c stream_text.c responses.c anthropic.c json_schema.c \
                       tool_calls.c ids.c)
FUZZ_SRCS_sampler   := src/common/err.c src/sampler/sampler.c
FUZZ_SRCS_jinja     := src/common/err.c $(addprefix src/api/,jinja.c jinja_parse.c jinja_value.c chat_jinja.c)
FUZZ_LLHTTP_http    := $(FUZZ_BUILD)/llhttp/api.o $(FUZZ_BUILD)/llhttp/http.o $(FUZZ_BUILD)/llhttp/llhttp.o
FUZZ_LIBS_api       := -ljansson
FUZZ_LIBS_http      := -ljansson
FUZZ_SRCS_grammar   := src/common/err.c src/sampler/grammar.c
FUZZ_SRCS_json_schema := src/common/err.c src/common/strbuf.c src/api/json_schema.c
FUZZ_LIBS_jinja     := -ljansson
FUZZ_LIBS_json_schema := -ljansson
$(foreach t,$(FUZZ_TARGETS),$(eval FUZZ_OBJS_$(t) := $(patsubst %.c,$(FUZZ_BUILD)/%.o,$(FUZZ_SRCS_$(t)))))
# json_schema reaches the grammar matcher only through the converter's output: there, comparison
# tracing would follow derived state (byte sets, configurations), not input bytes, and costs three
# quarters of the time. The matcher keeps its edge coverage; the converter keeps comparison tracing.
FUZZ_OBJS_json_schema += $(FUZZ_BUILD)/nocmp/src/sampler/grammar.o
FUZZ_MAXLEN_gguf      := 65536
FUZZ_MAXLEN_tokenizer := 8192
FUZZ_MAXLEN_http      := 8192
FUZZ_MAXLEN_api       := 16384
FUZZ_MAXLEN_sampler   := 8192
FUZZ_MAXLEN_jinja     := 16384
FUZZ_MAXLEN_grammar   := 4096
FUZZ_MAXLEN_json_schema := 4096

SHELL := /bin/bash
.PHONY: run build
.SECONDARY: # keep the objects: the next run rebuilds only what changed
.SECONDEXPANSION:
run: build
	@FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_RUNS=$(FUZZ_RUNS) FUZZ_JOBS=$(FUZZ_JOBS) \
	  scripts/fuzz-run $(foreach t,$(FUZZ_TARGETS),$(t):$(or $(FUZZ_MAXLEN_$(t)),$(FUZZ_MAXLEN_api)))

build: $(patsubst %,$(FUZZ_BUILD)/fuzz-%,$(FUZZ_TARGETS))

$(FUZZ_BUILD)/fuzz-%: test/fuzz/%_fuzz.c $$(FUZZ_OBJS_$$*) $$(FUZZ_LLHTTP_$$*) scripts/fuzz.mk
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $(filter-out scripts/fuzz.mk,$^) $(FUZZ_LIBS_$*) -lm

# llhttp is generated code: built without our warning flags, strict as in deps.mk (the server's build).
$(FUZZ_BUILD)/llhttp/%.o: $(LLHTTP_DIR)/%.c scripts/fuzz.mk
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -DLLHTTP_STRICT_MODE=1 -I$(LLHTTP_INC) -c $< -o $@

$(FUZZ_BUILD)/nocmp/%.o: %.c scripts/fuzz.mk
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fno-sanitize-coverage=trace-cmp -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/%.o: %.c scripts/fuzz.mk
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@

-include $(shell find $(FUZZ_BUILD) -name '*.d' 2>/dev/null)
