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
#   make test       install what is missing, build, run every test: the
#                   suite (prove) standalone, its routing and goal files on a
#                   Redis Cluster and the whole suite under ASan + UBSan, as
#                   one parallel run (scripts/suite.pl), then the containers,
#                   the fuzz replay and a short fuzzing pass; what CI runs
#   make test-fast  the standalone and Cluster passes only (the quick loop)
#   make test-cluster  only the Redis Cluster pass (TEST_IOA_REDIS=cluster)
#   make test-asan  only the ASan + UBSan pass: nginx built from Debian's
#                   source with the module compiled in, and sanitizer builds
#                   of the workers; any report fails it
#   make fuzz       the libFuzzer harnesses of fuzz/ (WebSocket frames,
#                   envelopes, REST bodies, Redis replies, whole HTTP
#                   requests into every endpoint), FUZZ_SECONDS each (60);
#                   make fuzz-regress replays every committed seed and
#                   crash input once
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
#                   runs it, installing podman (and iptables) from Debian
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
# the sanitizer builds (make test-asan, make test): see "Sanitizers" below
ASAN_DIR    := $(BUILD)/asan
ASAN_NGINX  := $(ASAN_DIR)/sbin/nginx
ASAN_CFLAGS := -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \
    -Wno-format-truncation
IOA_PORT   ?= 7788
IOA_REDIS_PORT ?= 7789

# What each target installs from Debian: scripts/deps.list, by set (build,
# run, test, asan, bench, deb, docker, fuzz, llama).  `scripts/deps.sh
# install SET` installs only what is missing (a second run costs a few
# `command -v`, no network), then runs the preflight: anything a target
# calls that is still not there is named with its package before anything
# is built.  make run installs the run set only: no browser, no podman.
DEPS := bash $(REPO)/scripts/deps.sh install

MODULE_SRCS := $(wildcard ngx_ioa_module/*.[ch] ngx_ioa_module/*/*.[ch]) \
    $(wildcard lib/*.[ch] redis-scripts/*.lua) config

.PHONY: test-build bench-bins asan-fuzz-build test-fast fuzz-run-ci fuzz-run-regress
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

# scripts/ioa-terms.c: the tokenizer the hub and the worker build from
# (lib/), so that tests and the bench give the scripts the terms the hub
# would
$(TERMS): scripts/ioa-terms.c lib/ioa_tokenize.c lib/ioa_tokenize.h
	@mkdir -p $(BUILD)
	$(CC) -std=c11 -D_DEFAULT_SOURCE -Wall -Wextra -Werror -pedantic -g -O2 \
	    -Ilib -o $@ scripts/ioa-terms.c lib/ioa_tokenize.c

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
# 3-master Redis Cluster that each file starts (IoaTest::Cluster).
# t/130-cluster.t (slot migration, failover, nodes down) always starts
# Clusters of its own, so the standalone pass has it already.
CLUSTER_TESTS := t/020-rooms.t t/025-floor.t t/040-http-transport.t t/045-room-feed.t \
    t/050-scale-out.t t/100-goals.t t/175-limits-fleet.t t/102-decisions.t t/190-bounds.t \
    t/215-metrics.t t/220-retention.t t/230-discovery-index.t \
    t/245-metrics-redis.t t/280-a2a-server.t t/330-delete.t t/140-chain.t t/145-erase.t \
    t/146-erase-goals.t t/205-ioa-frontend.t \
    t/125-engine.t

# scripts/suite.pl: test passes as one parallel prove (TEST_JOBS files at
# a time, default twice the cores plus two: the files mostly wait), the
# slowest first, then the ten slowest files with their times and, for any
# file that failed, its failures again after the summary (a CI log keeps
# its tail); with the asan pass, any sanitizer report fails it.
SUITE := perl scripts/suite.pl

# make runs a recipe line that names $(MAKE) even under make -n; the
# phases of make test name it through this instead, so that `make -n test`
# only prints them (t/005-deps.t asks it)
SUBMAKE := $(MAKE)

# make test: every test.  First everything it runs is built, side by side
# (make -j2: llama-server's build leaves a core idle much of the time, and
# the fuzzers use the nginx source the ASan build fetches), while the
# container images are built and tested in the background (make
# docker-test: downloads and waits, mostly); then the three passes of the
# suite, standalone, Cluster and ASan, as one parallel prove; then the
# fuzz replay and the short fuzzing pass.
# scripts/phases.sh times each phase and goes on after one that failed, so
# one run says everything that is wrong; its summary fails make test if any
# phase did.  make test-fast is the
# quick loop: the standalone and Cluster passes only.
test:
	@$(DEPS) asan fuzz
	@bash scripts/phases.sh --start
	@bash scripts/phases.sh --bg containers $(SUBMAKE) -s docker-test
	@bash scripts/phases.sh --must build $(SUBMAKE) -s -j2 test-build
	@bash scripts/phases.sh --wait containers
	@bash scripts/phases.sh suite $(SUITE) standalone=t/ \
	    "cluster=$(CLUSTER_TESTS)" asan=t/
	@bash scripts/phases.sh fuzz $(SUBMAKE) -s fuzz-run-regress fuzz-run-ci
	@bash scripts/phases.sh --summary

test-build: $(MODULE) agent worker $(TERMS) $(NODE_DEPS) llama asan-fuzz-build \
            bench-bins

# the bench's programs, which t/120-bench-smoke.t runs in two passes at
# once: built here, once, rather than by two makes writing one file
bench-bins:
	$(MAKE) -s -C bench
	$(MAKE) -s -C bench/ceiling
	$(MAKE) -s -C bench/floor

asan-fuzz-build: $(ASAN_NGINX) asan-workers
	bash scripts/fuzz.sh build

test-fast: deps-test
	$(MAKE) -s $(MODULE) agent worker llama $(TERMS) $(NODE_DEPS)
	$(SUITE) standalone=t/ "cluster=$(CLUSTER_TESTS)"

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
	$(SUITE) "cluster=$(CLUSTER_TESTS)"

# Sanitizers: nginx from Debian's source with ASan + UBSan and the module
# compiled in (scripts/asan-nginx.sh, cached in build/asan), the workers
# built the same way into build/asan/workers; suite.pl's asan pass runs
# the suite against them and fails on any report in build/asan/logs,
# whatever the tests said.  Nothing is retried: a test that passes only on
# a second try is a race, and every start-up waits for the hub to be
# ready (t/lib/IoaTest/Ready.pm) however slow the sanitized processes are.

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
	$(SUITE) asan=t/

# libFuzzer (clang 14): scripts/fuzz.sh builds nginx's and the module's
# objects with clang and links one binary per harness into build/fuzz/bin.
FUZZ_SECONDS ?= 60

fuzz-build: deps-fuzz
	bash scripts/fuzz.sh build

fuzz: fuzz-build
	bash scripts/fuzz.sh run $(FUZZ_SECONDS)

# without the build step: what make test runs after test-build
fuzz-run-ci:
	bash scripts/fuzz.sh run 120 100000

fuzz-run-regress:
	bash scripts/fuzz.sh regress

# CI's pass: 100,000 inputs per byte-level harness from a fixed seed (a few
# seconds each) and 20,000 for http_request (a whole hub per input: about
# 40 s), the same mutations every run
fuzz-ci: fuzz-build
	$(MAKE) -s fuzz-run-ci

fuzz-regress: fuzz-build
	$(MAKE) -s fuzz-run-regress

clean:
	rm -rf $(BUILD) workers/build t/servroot*
