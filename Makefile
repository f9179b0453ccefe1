# georelay: the README's two commands.
#   make run   install missing Debian packages, build in release mode, run on config/georelay.json5
#   make test  the same install, then every test
#   make deb   the Debian package, georelay_<version>_<arch>.deb (packaging/build-deb.sh);
#              make deb ARCH=arm64 cross-compiles it for arm64 (packaging/arm64/build.sh)
#   make test-arm64  that package, checked under qemu user-mode (Tests/Package/check-deb.sh)
#   make format / make lint  the code's layout (.swift-format), and no new direct read of the system
#              clock outside its own files (Tests/Lint/clock_reads.py: time is handed in); make test runs the lint first
#   make screenshots  the status page in headless Chromium, its screenshots into docs/
#   make simulate DAYS=365 SEED=1 [STEP=60]  a voyage of the relay's core on simulated time (Tests/SimulationTests)
#   make faketime-month DAYS=30  the real binary through 30 days of its own time under libfaketime

APT_PACKAGES := libsqlite3-dev libcurl4-openssl-dev libzstd-dev zlib1g-dev pkg-config socat libxml2-utils openssl python3 faketime fuse3 libfuse3-dev \
	dpkg-dev binutils lintian adduser chromium fonts-dejavu-core iproute2
CONFIG ?= config/georelay.json5
SWIFT ?= swift

PREFIX ?= /usr/local
DESTDIR ?=

# One release build for make run, install, deb and test: the Swift runtime linked in statically
# (the package must run without a toolchain), no $ORIGIN runpath, and full RELRO (lintian's
# hardening-no-bindnow). These flags only change the link step, so the build costs what a
# dynamically linked one does.
RELEASE_FLAGS := -c release --static-swift-stdlib --disable-local-rpath -Xlinker -z -Xlinker now
RELEASE_BIN = $$($(SWIFT) build $(RELEASE_FLAGS) --show-bin-path)/georelay

VERSION := $(shell tr -d '[:space:]' < VERSION)
NATIVE_ARCH := $(shell dpkg --print-architecture)
ARCH ?= $(NATIVE_ARCH)
DEB := georelay_$(VERSION)_$(ARCH).deb
DEB_ARM64 := georelay_$(VERSION)_arm64.deb

.PHONY: run test test-arm64 build deps bench clean install fuzz deb screenshots lint format simulate faketime-month

# Installs only what is missing, so a ready machine does not touch the network.
deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		SUDO=""; [ "$$(id -u)" -ne 0 ] && SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

build: deps
	$(SWIFT) build $(RELEASE_FLAGS) --product georelay

run: build
	$(RELEASE_BIN) run --config $(CONFIG)

# The package for this machine's architecture, from the release build (apt install ./$(DEB)),
# or with ARCH=arm64 cross-compiled by Debian 13's own Swift in roots kept for the machine in
# /var/cache/georelay/arm64-build (packaging/arm64/build.sh: about 2 minutes for the roots the
# first time on a machine, 2 for the build).
ifeq ($(ARCH),$(NATIVE_ARCH))
deb: build
	packaging/build-deb.sh $(RELEASE_BIN) $(DEB)
else ifeq ($(ARCH),arm64)
deb:
	packaging/arm64/build.sh $(DEB) >/dev/null
else
deb:
	@echo "make deb: ARCH=$(ARCH) is neither this machine's $(NATIVE_ARCH) nor arm64" >&2; exit 1
endif

# The arm64 package, made as above and checked under qemu user-mode against the arm64 root:
# control data, files, Depends against the arm64 libraries, lintian, and a relay that takes a
# position and delivers it. Kept out of make test for its time (BENCHMARKS.md, the package).
test-arm64:
	packaging/arm64/build.sh $(DEB_ARM64) >/dev/null
	DEB_ARCH=arm64 Tests/Package/check-deb.sh $(DEB_ARM64)

# Tests start the real georelay binary: the release build `make run` uses, so what compiles only
# in debug cannot land, and the tests that start it cost a third less CPU than with the debug one.
# The power-cut test builds its FUSE filesystem (Tests/Helpers/lazyfs) itself, with cc and libfuse3.
# The package is made from it (about 20 s, most of it xz) and checked (check-deb.sh, about 15 s).
# The status page is checked in headless Chromium (Tests/Helpers/status_page_browser.py, about
# 5 s); here a browser that cannot start fails the test instead of skipping it.
# The fuzzer (one swiftc process, about 70 s) builds beside the release build, which keeps about
# one core busy (whole-module optimisation, one module after another); its log is printed if it fails.
test: deps lint
	mkdir -p .build
	Tests/Fuzz/fuzz.sh build > .build/fuzz-build.log 2>&1 & fuzzer=$$!; \
	$(SWIFT) build $(RELEASE_FLAGS) --product georelay; built=$$?; \
	wait $$fuzzer || { cat .build/fuzz-build.log >&2; exit 1; }; exit $$built
	packaging/build-deb.sh $(RELEASE_BIN) $(DEB)
	Tests/Package/check-deb.sh $(DEB)
	$(SWIFT) build --build-tests
	GEORELAY_BIN=$(RELEASE_BIN) GEORELAY_REQUIRE_BROWSER=1 $(SWIFT) test --skip-build
	Tests/Fuzz/fuzz.sh ci

# A voyage on simulated time (Tests/SimulationTests): DAYS days of the seed SEED in STEP-minute
# steps (365 days in about 4.5 minutes at 60-minute steps). An optimised build of the tests, in
# a build directory of its own so make test's builds are not redone (about 2 minutes the first
# time). make test runs three seeds of 4 days at 30-minute steps (30 with GEORELAY_LONG_TESTS=1).
DAYS ?= 365
SEED ?= 1
STEP ?= 60
SIMULATE_BUILD := --scratch-path .build/simulate -c release -Xswiftc -enable-testing
simulate: deps
	$(SWIFT) build $(SIMULATE_BUILD) --build-tests
	GEORELAY_SIM_DAYS=$(DAYS) GEORELAY_SIM_SEED=$(SEED) GEORELAY_SIM_STEP_MINUTES=$(STEP) \
		$(SWIFT) test $(SIMULATE_BUILD) --skip-build --filter VoyageTests

# The real binary under libfaketime, its clocks stepped 15 minutes at a time through DAYS days
# (Tests/IntegrationTests/FakeTimeMonthTests; 30 days in about 40 s). make test runs 4 days.
faketime-month: DAYS = 30
faketime-month: deps
	$(SWIFT) build --build-tests
	GEORELAY_BIN=$$($(SWIFT) build --show-bin-path)/georelay GEORELAY_FAKETIME_DAYS=$(DAYS) \
		$(SWIFT) test --skip-build --filter FakeTimeMonthTests

# The code's layout, as .swift-format says (swift format ships with the toolchain; about 4 s):
# `make format` rewrites the tree, `make lint` fails on anything it would change or warn about.
SWIFT_FORMAT_PATHS := Sources Tests Package.swift
lint:
	$(SWIFT) format lint --strict --recursive --parallel $(SWIFT_FORMAT_PATHS)
	python3 Tests/Lint/clock_reads.py
	python3 Tests/Lint/suites_off_the_pool.py

format:
	$(SWIFT) format format --in-place --recursive --parallel $(SWIFT_FORMAT_PATHS)

# The status page at phone (390x844) and laptop (1280 wide) sizes, from the browser test's
# fixture, into docs/ for docs/operating.md.
screenshots: deps
	$(SWIFT) build --product georelay
	$(SWIFT) build --build-tests
	GEORELAY_BIN=$$($(SWIFT) build --show-bin-path)/georelay GEORELAY_REQUIRE_BROWSER=1 GEORELAY_SCREENSHOTS=$(CURDIR)/docs \
		$(SWIFT) test --skip-build --filter StatusPageTests

# One fuzz target for as long as you like: make fuzz TARGET=lines ARGS=-max_total_time=600
TARGET ?= lines
fuzz:
	Tests/Fuzz/fuzz.sh $(TARGET) $(ARGS)

# The forward figure compares against wrk on the same server.
bench: deps
	@dpkg -s wrk >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk; }
	$(SWIFT) run -c release georelay-bench

# The binary, the systemd unit, an example config (kept if one exists) and the docs.
install: build
	install -D -m 0755 $(RELEASE_BIN) $(DESTDIR)$(PREFIX)/bin/georelay
	install -D -m 0644 contrib/georelay.service $(DESTDIR)$(PREFIX)/lib/systemd/system/georelay.service
	sed -i 's|/usr/local/|$(PREFIX)/|g' $(DESTDIR)$(PREFIX)/lib/systemd/system/georelay.service
	install -d $(DESTDIR)/etc/georelay
	[ -e $(DESTDIR)/etc/georelay/georelay.json5 ] || install -m 0640 contrib/georelay.json5 $(DESTDIR)/etc/georelay/georelay.json5
	install -D -m 0644 README.md $(DESTDIR)$(PREFIX)/share/doc/georelay/README.md
	install -d $(DESTDIR)$(PREFIX)/share/doc/georelay/docs
	install -m 0644 docs/*.md $(DESTDIR)$(PREFIX)/share/doc/georelay/docs/
	install -D -m 0644 config/georelay.json5 $(DESTDIR)$(PREFIX)/share/doc/georelay/georelay.json5

clean:
	rm -rf .build georelay_*.deb
