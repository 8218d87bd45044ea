# deps.mk: where uvlm's dependencies come from (all Debian packages; see scripts/install-deps).
# libuv, jansson and OpenBLAS through pkg-config; llhttp is compiled from the C sources that
# Debian's node-llhttp package ships (it has no shared library).

DEPS_PKGS      := libuv jansson openblas
DEPS_CFLAGS    := $(shell pkg-config --cflags $(DEPS_PKGS))
DEPS_LIBS      := $(shell pkg-config --libs $(DEPS_PKGS)) -lm

LLHTTP_DIR     := /usr/share/llhttp
LLHTTP_INC     := /usr/share/include/llhttp
LLHTTP_SRCS    := $(LLHTTP_DIR)/api.c $(LLHTTP_DIR)/http.c $(LLHTTP_DIR)/llhttp.c
LLHTTP_OBJS    := $(patsubst $(LLHTTP_DIR)/%.c,$(BUILD)/llhttp/%.o,$(LLHTTP_SRCS))
DEPS_CFLAGS    += -I$(LLHTTP_INC)

# llhttp is generated code: build it without our warning flags. Strict mode: the parser checks
# what the lenient build skips, such as the CRLF after each chunk's data (a request-smuggling
# risk behind a proxy that frames the body differently); test/net/parse_test.c holds the cases.
LLHTTP_FLAGS   := -DLLHTTP_STRICT_MODE=1
$(BUILD)/llhttp/%.o: $(LLHTTP_DIR)/%.c deps.mk
	@mkdir -p $(dir $@)
	$(CC) $(OPTFLAGS) $(SANFLAGS) $(LLHTTP_FLAGS) -I$(LLHTTP_INC) -c $< -o $@
