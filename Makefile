# kgate: one C program; no GPU SDK needed to build (the runtime is dlopen'ed).
CC ?= cc
CFLAGS ?= -O3 -g
KG_CFLAGS = -std=c11 -Wall -Wextra $(CFLAGS)
LDLIBS = -ldl -lpthread -lm

kgate: kgate.c ref.c kernels.hip
	$(CC) $(KG_CFLAGS) -o $@ kgate.c $(LDLIBS)

# CPU paths under AddressSanitizer and UndefinedBehaviorSanitizer (tests.sh).
kgate-asan: kgate.c ref.c kernels.hip
	$(CC) -std=c11 -Wall -Wextra -O1 -g -fno-omit-frame-pointer \
	    -fsanitize=address,undefined -fno-sanitize-recover=undefined -o $@ kgate.c $(LDLIBS)

clean:
	rm -f kgate kgate-asan

.PHONY: clean
