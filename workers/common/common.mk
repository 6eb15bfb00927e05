# workers/common/common.mk -- the shared helpers (ioa_common.h), included by
# workers/worker/Makefile and workers/agent/Makefile after they set OBJDIR
# and COMMON_CFLAGS (their own warning and feature flags).  They include the
# objects' dependency files themselves, at their end: a .d file read here
# would make its object the including Makefile's default goal.
#
# Each program compiles these into its own build directory, $(OBJDIR)/common,
# rather than into one archive both link: every program then builds them
# with its own flags (the agent is _GNU_SOURCE, the worker -pedantic
# _DEFAULT_SOURCE, so the files must stay clean under both), a
# BUILD=... sanitizer build gets sanitized copies without further ado, and
# `make -j` over both programs never has two makes writing one file.  The
# cost is five small files compiled twice.

COMMON_DIR  := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
COMMON_SRCS := ioa_alloc.c ioa_buf.c ioa_health.c ioa_json.c ioa_random.c \
               ioa_time.c
COMMON_HDRS := $(wildcard $(COMMON_DIR)/*.h)
COMMON_OBJS := $(COMMON_SRCS:%.c=$(OBJDIR)/common/%.o)

# a pattern rule only: an ordinary target here would become the including
# Makefile's default goal
$(OBJDIR)/common/%.o: $(COMMON_DIR)/%.c $(COMMON_HDRS)
	@mkdir -p $(@D)
	$(CC) $(COMMON_CFLAGS) -I$(COMMON_DIR) $(CFLAGS) -MMD -MP -c -o $@ $<
