# Chronos: the two quick-start commands are `make demo` and `make test`.

GO        ?= go
PKGS      ?= ./...
TESTFLAGS ?= -race -timeout 20m
SUDO      := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all build demo test deps vet fmt-check lint tools unit bench fuzz clean
.PHONY: deps-promtool deps-postgres rules

all: build

build:
	$(GO) build -o bin/chronos ./cmd/chronos

## install: the binary into $(GOBIN) (or $(go env GOPATH)/bin), as `go install ./cmd/chronos`.
.PHONY: install
install:
	$(GO) install ./cmd/chronos

## image: the container image from a static binary built here, with no base image to pull
## (deploy/image/Dockerfile, FROM scratch): the build context bin/image holds the binary, the
## user's passwd and group, CA certificates, Go's zone database and the user's directories.
## CONTAINER_BUILDER is podman, buildah or docker (the first found); IMAGE names the image.
IMAGE             ?= chronos:local
VERSION           ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
CA_CERTIFICATES   ?= /etc/ssl/certs/ca-certificates.crt
CONTAINER_BUILDER ?= $(firstword $(foreach b,podman buildah docker,$(if $(shell command -v $(b) 2>/dev/null),$(b))))
IMAGE_CONTEXT     ?= bin/image
.PHONY: image image-context
image: image-context
	@[ -n "$(CONTAINER_BUILDER)" ] || { echo "no podman, buildah or docker to build the image: install one (apt-get install podman) or set CONTAINER_BUILDER" >&2; exit 1; }
	$(CONTAINER_BUILDER) $(if $(filter buildah,$(CONTAINER_BUILDER)),bud,build) -f deploy/image/Dockerfile -t $(IMAGE) $(IMAGE_CONTEXT)

image-context:
	@[ -r "$(CA_CERTIFICATES)" ] || { echo "$(CA_CERTIFICATES) is missing: install ca-certificates or set CA_CERTIFICATES" >&2; exit 1; }
	rm -rf $(IMAGE_CONTEXT)
	mkdir -p $(IMAGE_CONTEXT)/rootfs/usr/local/bin $(IMAGE_CONTEXT)/rootfs/usr/local/share \
		$(IMAGE_CONTEXT)/rootfs/etc/ssl/certs $(IMAGE_CONTEXT)/rootfs/etc/chronos \
		$(IMAGE_CONTEXT)/rootfs/var/lib/chronos $(IMAGE_CONTEXT)/rootfs/tmp
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" \
		-o $(IMAGE_CONTEXT)/rootfs/usr/local/bin/chronos ./cmd/chronos
	echo 'chronos:x:65532:65532:chronos:/var/lib/chronos:/sbin/nologin' > $(IMAGE_CONTEXT)/rootfs/etc/passwd
	echo 'chronos:x:65532:' > $(IMAGE_CONTEXT)/rootfs/etc/group
	cp $(CA_CERTIFICATES) $(IMAGE_CONTEXT)/rootfs/etc/ssl/certs/ca-certificates.crt
	cp "$$($(GO) env GOROOT)/lib/time/zoneinfo.zip" $(IMAGE_CONTEXT)/rootfs/usr/local/share/zoneinfo.zip
	chmod 0755 $(IMAGE_CONTEXT)/rootfs/usr/local/bin/chronos
	chmod 0644 $(IMAGE_CONTEXT)/rootfs/etc/passwd $(IMAGE_CONTEXT)/rootfs/etc/group \
		$(IMAGE_CONTEXT)/rootfs/etc/ssl/certs/ca-certificates.crt $(IMAGE_CONTEXT)/rootfs/usr/local/share/zoneinfo.zip
	chmod 0700 $(IMAGE_CONTEXT)/rootfs/var/lib/chronos
	chmod 1777 $(IMAGE_CONTEXT)/rootfs/tmp

## demo: everything in one process on the embedded engine, sample jobs firing within seconds.
demo:
	$(GO) run ./cmd/chronos demo $(DEMOFLAGS)

## test: install what the tests need, then vet, the gofmt check, the linters and the race-enabled
## test suite.
test: deps vet fmt-check lint unit
test: rules

## deps-chromium: Debian's chromium for the browser tests (internal/browsertest), installed when
## missing and root; CHRONOS_TEST_CHROMIUM names another Chromium binary instead.
.PHONY: deps-chromium
deps-chromium:
	@if [ -n "$$CHRONOS_TEST_CHROMIUM" ]; then \
		[ -x "$$CHRONOS_TEST_CHROMIUM" ] || { echo "CHRONOS_TEST_CHROMIUM=$$CHRONOS_TEST_CHROMIUM is not an executable" >&2; exit 1; }; \
	elif [ ! -x /usr/bin/chromium ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing chromium"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
		else \
			echo "chromium is missing: install it (apt-get install chromium) or set CHRONOS_TEST_CHROMIUM" >&2; exit 1; \
		fi; \
	fi

## deps: redis-server for the Redis engine's tests and PyJWT with cryptography for the Hermes
## compatibility test (Debian packages, installed when missing and root), Go modules.
PYJWT_PROBE := import jwt, cryptography; from jwt import PyJWKClient

deps: deps-promtool
deps: deps-chromium
deps: deps-image
deps: deps-postgres
deps:
	@if [ -z "$$TEST_REDIS_URL" ] && ! command -v redis-server >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing redis-server"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; \
		else \
			echo "redis-server is missing: install it (apt-get install redis-server) or set TEST_REDIS_URL" >&2; exit 1; \
		fi; \
	fi
	@py_ok() { [ -n "$$1" ] && "$$1" -c '$(PYJWT_PROBE)' >/dev/null 2>&1; }; \
	if [ -n "$$CHRONOS_TEST_PYTHON" ]; then \
		py_ok "$$CHRONOS_TEST_PYTHON" || { echo "CHRONOS_TEST_PYTHON=$$CHRONOS_TEST_PYTHON cannot import jwt and cryptography" >&2; exit 1; }; \
	elif ! py_ok "$$(command -v python3)" && ! py_ok /usr/bin/python3; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing python3-jwt and python3-cryptography"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-jwt python3-cryptography >/dev/null; \
			py_ok /usr/bin/python3 || { echo "/usr/bin/python3 still cannot import jwt and cryptography" >&2; exit 1; }; \
		else \
			echo "PyJWT is missing: install it (apt-get install python3-jwt python3-cryptography) or set CHRONOS_TEST_PYTHON" >&2; exit 1; \
		fi; \
	fi
	$(GO) mod download

## deps-image: podman and runc for the image test (e2e.TestImageRunsNAS builds the image with
## `make image` and runs NAS in it), installed when missing and root; without them the test is
## skipped, and this says so. runc, because crun cannot start containers on a host with cgroups in
## hybrid mode, as nested hosts often are (docs/operations.md, "Building the image here").
.PHONY: deps-image
deps-image:
	@if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing podman and runc (for the image test)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc >/dev/null; \
		else \
			echo "NOTE: podman is missing: the image test (e2e.TestImageRunsNAS) will be SKIPPED; install podman and runc to run it" >&2; \
		fi; \
	fi

## deps-promtool: promtool, which checks and unit-tests the alert rules (Debian's prometheus
## package, installed when missing and root).
deps-promtool:
	@if ! command -v promtool >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing prometheus (for promtool)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
		else \
			echo "promtool is missing: install it (apt-get install prometheus)" >&2; exit 1; \
		fi; \
	fi

## rules: the Prometheus alert rules are valid and pass their unit tests.
rules: deps-promtool
	promtool check rules deploy/prometheus/alerts.yaml
	cd deploy/prometheus && promtool test rules alerts_test.yaml

## deps-postgres: PostgreSQL for the sql:// fanout input's tests (internal/pgtest starts a
## throwaway cluster with its initdb and pg_ctl), installed when missing and root.
deps-postgres:
	@if [ -z "$$TEST_POSTGRES_URL" ] && ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 && ! command -v pg_ctl >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing postgresql"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
		else \
			echo "postgresql is missing: install it (apt-get install postgresql) or set TEST_POSTGRES_URL" >&2; exit 1; \
		fi; \
	fi

vet:
	$(GO) vet $(PKGS)

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

## The linters, pinned; `make tools` installs them with go install into a directory named for
## their versions, so a version bump installs afresh.
STATICCHECK_VERSION ?= v0.7.0
DEADCODE_VERSION    ?= v0.52.0
TOOLS               := $(CURDIR)/bin/tools/staticcheck-$(STATICCHECK_VERSION)-deadcode-$(DEADCODE_VERSION)

tools:
	@[ -x $(TOOLS)/staticcheck ] || GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@[ -x $(TOOLS)/deadcode ] || GOBIN=$(TOOLS) $(GO) install golang.org/x/tools/cmd/deadcode@$(DEADCODE_VERSION)

## lint: staticcheck clean, go.mod tidy, and no code that nothing (tests included) reaches.
lint: tools
	$(TOOLS)/staticcheck $(PKGS)
	$(GO) mod tidy -diff
	@out=$$($(TOOLS)/deadcode -test $(PKGS)); \
	if [ -n "$$out" ]; then echo "unreachable code (deadcode -test):"; echo "$$out"; exit 1; fi

## unit: every test. Where podman is installed and the tests run as root, the image test
## (e2e.TestImageRunsNAS) must build and run the image: CHRONOS_REQUIRE_IMAGE=1 turns its skip
## (a host that cannot run containers) into a failure. Set CHRONOS_REQUIRE_IMAGE=0 to allow it.
unit:
	@req=$${CHRONOS_REQUIRE_IMAGE:-$$([ "$$(id -u)" = 0 ] && command -v podman >/dev/null 2>&1 && echo 1 || echo 0)}; \
	echo "CHRONOS_REQUIRE_IMAGE=$$req $(GO) test $(TESTFLAGS) $(PKGS)"; \
	CHRONOS_REQUIRE_IMAGE=$$req $(GO) test $(TESTFLAGS) $(PKGS)

## bench: the benchmarks of the hot paths (short); see README for `chronos bench relay`.
bench:
	$(GO) test -run '^$$' -bench . -benchtime 1x $(PKGS)

## bench-peers: the same burst through Chronos and through asynq's scheduler, alternating, on a
## throwaway redis-server that bench/peers starts on a free loopback port and stops after (see
## bench/peers/README.md). Its own Go module, so not part of `make test`; it takes minutes and
## wants a quiet machine. PEERFLAGS adds flags, e.g. PEERFLAGS='--n 100000 --rounds 1'.
PEERFLAGS ?= --rounds 3 --n 10000
.PHONY: bench-peers
bench-peers: build
	cd bench/peers && $(GO) run ./cmd/peerbench --start-redis --chronos $(CURDIR)/bin/chronos $(PEERFLAGS)

clean:
	rm -rf bin
