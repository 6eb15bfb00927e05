# ioa: the two commands are `make run` and `make test`.
#
#   make            build the nginx module (build/ngx_http_ioa_module.so),
#                   the workers (workers/build/ioa-worker, ioa-agent) and
#                   build/ioa-terms (the discovery tokenizer as a filter,
#                   for the tests and the discovery bench)
#   make run        install what is missing, build, start Redis + nginx on
#                   127.0.0.1:$(IOA_PORT) and run the demo; Ctrl-C or
#                   `make stop` ends it
#   make stop       stop what `make run` started
#   make test       install what is missing, build, run every test (prove),
#                   then the routing and goal tests again on a Redis Cluster
#   make test-cluster  only the Redis Cluster run (TEST_IOA_REDIS=cluster)
#   make test-asan  the whole t/ suite against nginx built from Debian's
#                   source with ASan + UBSan and the module compiled in, and
#                   sanitizer builds of the workers; any report fails it
#   make fuzz       the libFuzzer harnesses of fuzz/ (WebSocket frames,
#                   envelopes, REST bodies, Redis replies), FUZZ_SECONDS
#                   each (60); make fuzz-regress replays every committed
#                   seed and crash input once
#   make bench      install what is missing (nchan, gnuplot, valgrind), then
#                   ioa against nchan and the Redis ceiling, open loop
#                   against nchan (issue 16's targets), the sweeps and
#                   plots, idle memory, goal latency, discovery (and under
#                   load), callgrind: BENCHMARKS.md (bench/run.sh; about 45
#                   minutes)
#   make deb        the Debian packages libnginx-mod-http-ioa and ioa
#                   (debian/, dpkg-buildpackage on a copy of the tree),
#                   checked by lintian, into build/deb/
#   make docker     the container images (docker/Dockerfile: redis, hub,
#                   worker, agent) with podman, or docker; a debian:bookworm
#                   base image is made with debootstrap where none is there
#   make docker-test  make docker, then docker/compose.yaml's whole network
#                   tested end to end (scripts/docker-test.sh); make test
#                   runs it, installing podman from Debian
#   make deps       only install the Debian packages the tests need;
#                   make deps-SET one set of scripts/deps.list (run, test,
#                   bench, deb, docker, fuzz, ...).  Every target installs
#                   its own set, and its preflight names anything still
#                   missing with its package, before anything is built
#   make clean

SHELL      := /bin/bash
REPO       := $(CURDIR)
BUILD      := $(REPO)/build
NGX_SRC    := /usr/share/nginx/src
MODULE     := $(BUILD)/ngx_http_ioa_module.so
AGENT      := $(REPO)/workers/build/ioa-agent
TERMS      := $(BUILD)/ioa-terms
IOA_PORT   ?= 7788
IOA_REDIS_PORT ?= 7789

# What each target installs from Debian: scripts/deps.list, by set (build,
# run, test, asan, bench, deb, docker, fuzz, llama).  `scripts/deps.sh
# install SET` installs only what is missing (a second run costs a few
# `command -v`, no network), then runs the preflight: anything a target
# calls that is still not there is named with its package before anything
# is built.  make run installs the run set only: no browser, no podman.
DEPS := bash $(REPO)/scripts/deps.sh install

MODULE_SRCS := $(wildcard ngx_ioa_module/*.c ngx_ioa_module/*.h) \
    $(wildcard redis-scripts/*.lua) config

.PHONY: all deps $(addprefix deps-,$(DEPS_SETS)) node-deps run stop test test-cluster test-asan asan-workers clean \
        module agent worker terms llama bench fuzz fuzz-ci fuzz-regress \
        fuzz-build deb docker docker-engine docker-test

all: deps-build
	@$(MAKE) -s $(MODULE) agent worker $(TERMS)

module: $(MODULE)

terms: $(TERMS)

agent:
	$(MAKE) -s -C workers/agent

worker:
	$(MAKE) -s -C workers/worker

# deps-SET: the packages of one set of scripts/deps.list, then its
# preflight.  make deps is the test set (everything the suite needs).
DEPS_SETS := build run test asan bench deb docker fuzz llama

$(addprefix deps-,$(DEPS_SETS)):
	@$(DEPS) $(@:deps-%=%)

deps: deps-test

# Debian's nginx-dev ships configure and headers but no top-level Makefile
# target for modules, so configure into our build directory and build only
# the modules there.  Nothing is written into /usr/share/nginx/src.
# NGX_CC_OPT / NGX_LD_OPT: the package build (debian/rules) passes
# Debian's hardening flags here.
NGX_CC_OPT ?= -g -O2
NGX_LD_OPT ?=

$(MODULE): $(MODULE_SRCS)
	@mkdir -p $(BUILD)
	cd $(NGX_SRC) && bash -c '. ./conf_flags; ./configure \
	    --with-cc-opt="$(NGX_CC_OPT) -fPIC -Wall -Werror" \
	    --with-ld-opt="$(NGX_LD_OPT) -fPIC" \
	    "$${NGX_CONF_FLAGS[@]}" --add-dynamic-module=$(REPO) \
	    --builddir=$(BUILD)/nginx' > $(BUILD)/configure.log 2>&1 \
	  || { cat $(BUILD)/configure.log; exit 1; }
	$(MAKE) -s -f $(BUILD)/nginx/Makefile -C $(NGX_SRC) modules
	@# rename, never overwrite: a running nginx has the old file mapped
	cp $(BUILD)/nginx/ngx_http_ioa_module.so $(MODULE).tmp
	mv -f $(MODULE).tmp $(MODULE)

# scripts/ioa-terms.c: the module's own tokenizer file, so that tests and
# the bench give the scripts the terms the hub would
$(TERMS): scripts/ioa-terms.c ngx_ioa_module/ngx_ioa_tokenize.c \
          ngx_ioa_module/ngx_ioa_tokenize.h
	@mkdir -p $(BUILD)
	$(CC) -std=c11 -D_DEFAULT_SOURCE -Wall -Wextra -Werror -pedantic -g -O2 \
	    -Ingx_ioa_module -o $@ scripts/ioa-terms.c \
	    ngx_ioa_module/ngx_ioa_tokenize.c

run: deps-run
	@$(MAKE) -s $(MODULE) agent worker
	IOA_PORT=$(IOA_PORT) IOA_REDIS_PORT=$(IOA_REDIS_PORT) bash scripts/run.sh

stop:
	bash scripts/stop.sh

# Node.js packages of the tests (t/270-mcp.t: @modelcontextprotocol/sdk),
# exactly the versions of t/node/package-lock.json, installed once into
# t/node/node_modules and again only when the lock file changes (npm
# itself comes with deps-test).
NODE_DEPS := $(REPO)/t/node/node_modules/.installed

node-deps: $(NODE_DEPS)

$(NODE_DEPS): t/node/package.json t/node/package-lock.json
	cd t/node && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# Debian packages (debian/): dpkg-buildpackage on a copy of the tree's
# files (tracked, and new ones not ignored) in build/deb/src, so neither
# the checkout nor its parent directory gets build products; the .debs,
# their -dbgsym and the .changes end in build/deb/.  lintian then checks
# them: an error or a warning fails the target.
DEB_DIR          := $(BUILD)/deb

deb: deps-deb
	rm -rf $(DEB_DIR) && mkdir -p $(DEB_DIR)/src/ioa
	@# a git checkout: its files, new ones too, not what .gitignore names;
	@# else (a tarball) everything but build products
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
	    git ls-files -z --cached --others --exclude-standard; \
	else \
	    find . \( -path ./build -o -path ./workers/build -o -path ./.git \
	        -o -path ./t/node/node_modules -o -name '*.o' \) \
	        -prune -o \( -type f -o -type l \) -print0; \
	fi | tar --null -T - --ignore-failed-read -c | tar -x -C $(DEB_DIR)/src/ioa
	cd $(DEB_DIR)/src/ioa && dpkg-buildpackage -us -uc -b \
	    > $(DEB_DIR)/build.log 2>&1 || { tail -40 $(DEB_DIR)/build.log; exit 1; }
	mv $(DEB_DIR)/src/*.deb $(DEB_DIR)/src/*.changes $(DEB_DIR)/src/*.buildinfo \
	    $(DEB_DIR)/
	@mv $(DEB_DIR)/src/*.ddeb $(DEB_DIR)/ 2>/dev/null || true
	rm -rf $(DEB_DIR)/src
	lintian --fail-on error,warning --info $(DEB_DIR)/*.changes
	@ls -1 $(DEB_DIR)/*.deb

# llama-server for the LLM tests (t/100 TEST 14): built once from the
# llama.cpp source in the node-llama-cpp npm package, cached outside the
# repo (~/.cache/ioa); a few minutes the first time, nothing afterwards
llama:
	bash scripts/llm/build-llama-server.sh >/dev/null

# make bench: ioa, nchan (Redis and memory stores) and the Redis ceiling,
# side by side in one run, the room-size and message-size sweeps (PNG
# plots), instructions per envelope under callgrind; writes BENCHMARKS.md
# (bench/run.sh).  nchan, the peer, comes with deps-bench only.
bench: deps-bench
	$(MAKE) -s $(MODULE) agent worker
	$(MAKE) -s -C bench
	$(MAKE) -s -C bench/ceiling
	$(MAKE) -s -C bench/floor
	bash bench/run.sh

# The files that route envelopes and run goals, once more against a
# 3-master Redis Cluster that each file starts (IoaTest::Cluster): about
# three minutes.  t/130-cluster.t (slot migration, failover, nodes down)
# always starts Clusters of its own, so the first run has it already.
CLUSTER_TESTS := t/020-rooms.t t/025-floor.t t/040-http-transport.t t/045-room-feed.t \
    t/050-scale-out.t t/100-goals.t t/175-limits-fleet.t t/102-decisions.t t/190-bounds.t \
    t/215-metrics.t t/220-retention.t t/230-discovery-index.t \
    t/245-metrics-redis.t t/280-a2a-server.t t/330-delete.t t/140-chain.t t/145-erase.t

# scripts/prove-report.sh runs prove and, on failure, repeats every failed
# assertion's diagnostics after prove's summary (a CI log keeps its tail).
PROVE := bash scripts/prove-report.sh

test: deps-test
	$(MAKE) -s $(MODULE) agent worker llama $(TERMS) $(NODE_DEPS)
	TEST_NGINX_LOAD_MODULES=$(MODULE) $(PROVE) -It/lib -r t/
	TEST_IOA_REDIS=cluster TEST_NGINX_LOAD_MODULES=$(MODULE) \
	    $(PROVE) -It/lib $(CLUSTER_TESTS)
	$(MAKE) docker-test

# Containers (README "Containers"): podman from Debian (no daemon needed;
# docker-compose only to check compose.yaml against Docker's schema too).
# IOA_ENGINE=docker uses a Docker engine instead.
docker-engine:
ifeq ($(IOA_ENGINE),docker)
	@command -v docker >/dev/null || { echo "IOA_ENGINE=docker, but no docker"; exit 1; }
else
	@$(DEPS) docker
endif

docker: docker-engine
	bash scripts/docker-build.sh

docker-test: docker
	bash scripts/docker-test.sh

test-cluster: deps-test
	$(MAKE) -s $(MODULE) agent worker
	TEST_IOA_REDIS=cluster TEST_NGINX_LOAD_MODULES=$(MODULE) \
	    $(PROVE) -It/lib $(CLUSTER_TESTS)

# Sanitizers: nginx from Debian's source with ASan + UBSan and the module
# compiled in (scripts/asan-nginx.sh, cached in build/asan), the workers
# built the same way into build/asan/workers; every process writes its
# reports into build/asan/logs, and a report there fails the run whatever
# the tests said.  Leak checking is off: nginx leaves its cycle to the
# kernel at exit by design.  t/ubsan.supp names the one UBSan finding in
# nginx's own core.  A file that fails here is run once more on its own
# (prove-report.sh --retry-failed, which says why and prints the first
# failure): sanitized processes are several times slower, and a bounded
# wait that runs out only under ASan is not what this pass looks for.
ASAN_DIR    := $(BUILD)/asan
ASAN_NGINX  := $(ASAN_DIR)/sbin/nginx
ASAN_LOGS   := $(ASAN_DIR)/logs
ASAN_CFLAGS := -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \
    -Wno-format-truncation
ASAN_ENV    := TEST_NGINX_BINARY=$(ASAN_NGINX) TEST_NGINX_LOAD_MODULES= \
    IOA_WORKER_BIN=$(ASAN_DIR)/workers/ioa-worker \
    IOA_AGENT_BIN=$(ASAN_DIR)/workers/ioa-agent \
    IOA_LLM_CHECK_BIN=$(ASAN_DIR)/workers/ioa-llm-check \
    ASAN_OPTIONS=log_path=$(ASAN_LOGS)/asan:detect_leaks=0 \
    UBSAN_OPTIONS=log_path=$(ASAN_LOGS)/ubsan:print_stacktrace=1:suppressions=$(REPO)/t/ubsan.supp

$(ASAN_NGINX): $(MODULE_SRCS) scripts/asan-nginx.sh
	bash scripts/asan-nginx.sh $(ASAN_DIR)

asan-workers:
	$(MAKE) -s -C workers/worker BUILD=$(ASAN_DIR)/workers \
	    CFLAGS='$(ASAN_CFLAGS)' LDFLAGS=-fsanitize=address,undefined
	$(MAKE) -s -C workers/agent BUILD=$(ASAN_DIR)/workers \
	    CFLAGS='$(ASAN_CFLAGS)' LDFLAGS=-fsanitize=address,undefined

test-asan: deps-asan
	$(MAKE) -s $(MODULE) $(ASAN_NGINX) asan-workers agent worker llama \
	    $(TERMS) $(NODE_DEPS)
	rm -rf $(ASAN_LOGS) && mkdir -p $(ASAN_LOGS)
	$(ASAN_ENV) $(PROVE) --retry-failed -It/lib -r t/; rc=$$?; \
	if ls $(ASAN_LOGS)/* >/dev/null 2>&1; then \
	    echo "sanitizer reports:"; cat $(ASAN_LOGS)/*; exit 1; \
	fi; \
	echo "no sanitizer report"; exit $$rc

# libFuzzer (clang 14): scripts/fuzz.sh builds nginx's and the module's
# objects with clang and links one binary per harness into build/fuzz/bin.
FUZZ_SECONDS ?= 60

fuzz-build: deps-fuzz
	bash scripts/fuzz.sh build

fuzz: fuzz-build
	bash scripts/fuzz.sh run $(FUZZ_SECONDS)

# CI's pass: 100,000 inputs per harness from a fixed seed (about 10 s each),
# the same every run
fuzz-ci: fuzz-build
	bash scripts/fuzz.sh run 120 100000

fuzz-regress: fuzz-build
	bash scripts/fuzz.sh regress

clean:
	rm -rf $(BUILD) workers/build t/servroot*
