# kgate: one C program; no GPU SDK needed to build (the runtime is dlopen'ed).
# kgate.c includes ref.c and src/*.c into one translation unit, and embeds kernels.hip.
CC ?= cc
CFLAGS ?= -O3 -g
KG_CFLAGS = -std=c11 -Wall -Wextra $(CFLAGS)
LDLIBS = -ldl -lpthread -lm
SRCS = kgate.c ref.c kernels.hip $(wildcard src/*.c)
ASAN_FLAGS = -std=c11 -Wall -Wextra -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
	-fno-sanitize-recover=undefined
BUILD_FLAGS = $(CC) $(KG_CFLAGS) $(LDLIBS) | $(ASAN_FLAGS)

kgate: $(SRCS) .build-flags
	$(CC) $(KG_CFLAGS) -o $@ kgate.c $(LDLIBS)

# CPU paths under AddressSanitizer and UndefinedBehaviorSanitizer (tests.sh).
kgate-asan: $(SRCS) .build-flags
	$(CC) $(ASAN_FLAGS) -o $@ kgate.c $(LDLIBS)

# The compiler and its flags as last built: rewritten only when they change, so
# that `make CC=clang` after `make` builds again.
.build-flags: FORCE
	@echo '$(BUILD_FLAGS)' | cmp -s - $@ || echo '$(BUILD_FLAGS)' >$@

clean:
	rm -f kgate kgate-asan .build-flags

.PHONY: clean FORCE
