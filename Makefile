# hvkube — `make run` to try it, `make test` to test it.

GO      := $(shell scripts/ensure-go.sh)
VERSION := $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
BIN     := bin/hvkube
LDFLAGS := -X main.version=$(VERSION)

.PHONY: all deps web examples build image image-browser image-osworld kube-assets crds deepcopy run stop demo test test-python test-short bench vet tidy fmt clean windows

all: build

deps:
	scripts/deps.sh

build: web
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/hvkube

# The dashboard (web/): npm ci when node_modules is missing or older than
# the lock file, then an esbuild bundle into web/dist, copied to
# internal/web/dist/app for the binary to embed. Both are ignored by git;
# without them the binary serves a page saying how to build the dashboard.
WEB_SRC := $(shell find web/src -type f 2>/dev/null) web/build.mjs
WEB_OUT := internal/web/dist/app/index.html

web: $(WEB_OUT)

web/node_modules/.package-lock.json: web/package.json web/package-lock.json
	@command -v npm >/dev/null || { echo "web: npm is missing: run make deps (Node.js 18 or newer)"; exit 1; }
	cd web && npm ci --no-audit --no-fund
	@touch $@

$(WEB_OUT): web/node_modules/.package-lock.json $(WEB_SRC)
	cd web && npm run --silent build

# The automation agents' examples: examples/playwright's npm packages
# (playwright-core), npm ci as for the dashboard. examples/selenium runs on
# Debian's python3-selenium (apt-get install python3-selenium). The QEMU
# test of playwright and selenium agents runs both.
examples: examples/playwright/node_modules/.package-lock.json

examples/playwright/node_modules/.package-lock.json: examples/playwright/package.json examples/playwright/package-lock.json
	@command -v npm >/dev/null || { echo "examples: npm is missing: run make deps (Node.js 18 or newer)"; exit 1; }
	cd examples/playwright && npm ci --no-audit --no-fund
	@touch $@

# Cross-build the server for Windows (the Hyper-V side).
windows:
	GOOS=windows GOARCH=amd64 $(GO) build -ldflags "$(LDFLAGS)" -o bin/hvkube.exe ./cmd/hvkube

# Builds the Linux desktop guest image from Debian packages (cached outside
# the repository, keyed by a hash of its inputs). Building needs root
# (debootstrap); a user is asked for sudo, and the image still lands in the
# user's cache. image-browser builds the browser-desktop flavor (Chromium
# and chromedriver, a file manager and an editor) the same way, and
# image-osworld the osworld flavor.
BUILD_IMAGE = if [ "$$(id -u)" -eq 0 ]; then images/linux-desktop/build.sh $(1); \
	else sudo env HVKUBE_CACHE_DIR="$${HVKUBE_CACHE_DIR:-$${XDG_CACHE_HOME:-$$HOME/.cache}/hvkube}" images/linux-desktop/build.sh $(1); fi

image:
	@$(call BUILD_IMAGE,linux-desktop)

image-browser:
	@$(call BUILD_IMAGE,browser-desktop)

# The osworld flavor: OSWorld's environment (the user `user`, sudo, GNOME's
# settings, Google Chrome as Chromium, LibreOffice, GIMP, VLC, Thunderbird)
# at 1920x1080, for OSWorld's own tasks (docs/osworld.md).
image-osworld:
	@$(call BUILD_IMAGE,osworld)

# Installs what is missing, builds, starts the server on the embedded
# defaults and runs the demo; the server stays up until Ctrl-C.
run: deps build image
	scripts/run.sh

# Stops the desktops a server left running in its data directory: saved to
# disk, their memory freed; the next start finds them Saved.
stop: build
	bin/hvkube serve --stop-desktops

# kube-apiserver and etcd for the Kubernetes tests, built once from the Go
# module proxy into the cache (hack/kube); prints their directory.
kube-assets:
	@GO=$(GO) hack/kube/build.sh

# deploy/crds from the Go types of internal/api and their markers
# (controller-tools' CRD generator); a test checks the files are current.
crds:
	$(GO) run ./internal/crd/crdgen -out deploy/crds

# internal/api/zz_generated.deepcopy.go from the Go types of internal/api
deepcopy:
	$(GO) run ./internal/api/deepcopygen

vet:
	$(GO) vet ./...
	GOOS=windows $(GO) build ./...
	GOOS=windows $(GO) vet ./...

tidy:
	$(GO) mod tidy -diff

fmt:
	gofmt -w $$(git ls-files '*.go')

BROWSER_TESTS := ^(TestBrowserDesktop|TestPortForwardToChromium|TestBrowserToolsOnQEMU|TestAutomationAgentsOnQEMU|TestOSWorldTasksOnQEMU|TestOSWorldImageOnQEMU)$$
# The race step leaves out the end-to-end tests of the server and the node
# on QEMU desktops (…OnQEMU, run once above: under the race detector they
# wait on the same emulated guests, minutes of CI for no other code); the
# QEMU driver's own tests still run under it.
RACE_SKIP := ^(TestBrowserDesktop|TestPortForwardToChromium|.*OnQEMU)$$

# The Kubernetes tests start a kube-apiserver and etcd of their own: they
# run in a step of their own, one package at a time (beside the emulated
# desktops of the QEMU tests, their CPU made timing-sensitive guests late).
# A test that needs a kube-apiserver is named …OnKubernetes, or listed here.
KUBE_TESTS := ^(TestConformance|TestCRDsValidateSeedYAML|TestWatchFromTooOld)$$|OnKubernetes
KUBE_PKGS  := ./internal/kube/... ./internal/node/ ./internal/controller/ ./internal/server/ ./internal/bench/ ./cmd/hvkube/

# The QEMU tests need the images, the browser tests Chromium and the
# Kubernetes tests a kube-apiserver; HVKUBE_REQUIRE_QEMU,
# HVKUBE_REQUIRE_BROWSER_IMAGE, HVKUBE_REQUIRE_OSWORLD_IMAGE,
# HVKUBE_REQUIRE_BROWSER and HVKUBE_REQUIRE_KUBE turn a missing one into a
# failure instead of a skip. The steps before the
# Kubernetes one skip the Kubernetes tests (no HVKUBE_KUBE_ASSETS); the last
# step runs them all, and fails without the binaries.
test: export HVKUBE_REQUIRE_QEMU = 1
test: export HVKUBE_REQUIRE_BROWSER_IMAGE = 1
test: export HVKUBE_REQUIRE_BROWSER = 1
test: export HVKUBE_REQUIRE_OSWORLD_IMAGE = 1
test: deps web examples vet tidy image image-browser image-osworld kube-assets build
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) test -count=1 -timeout 60m -skip '$(BROWSER_TESTS)' ./...
	@# Each of these boots a browser-desktop or osworld template (Chromium,
	@# LibreOffice under emulation): one at a time, not beside the other
	@# QEMU tests.
	$(GO) test -count=1 -p 1 -timeout 60m -run '$(BROWSER_TESTS)' ./internal/drivers/qemu/ ./internal/server/ ./cmd/hvkube/
	$(GO) test -count=1 -race -timeout 20m -skip '$(RACE_SKIP)' ./internal/api/... ./internal/store/... ./internal/server/... ./internal/hostpath/... ./internal/cli/... ./internal/controller/... ./internal/reconcile/... ./internal/agentstate/... ./internal/node/... ./internal/display/... ./internal/guestnet/... ./internal/drivers/qemu/... ./internal/cdp/... ./internal/browsertool/...
	HVKUBE_REQUIRE_KUBE=1 HVKUBE_KUBE_ASSETS=$$(GO=$(GO) hack/kube/build.sh) $(GO) test -count=1 -race -p 1 -timeout 30m -run '$(KUBE_TESTS)' $(KUBE_PKGS)
	$(MAKE) --no-print-directory test-python

# The Python SDK's tests, on a server of their own and a real desktop
# (bin/hvkube and the linux-desktop image). Debian's python3, whose
# python3-httpx and python3-pytest deps.sh installs: a python3 earlier in
# PATH may be one without them.
test-python:
	cd sdk/python && HVKUBE_BIN=$(CURDIR)/$(BIN) timeout 900 /usr/bin/python3 -m pytest -q -p no:cacheprovider tests

bench: build image
	$(BIN) bench api --write docs/benchmarks.md
	$(BIN) bench qemu --write docs/benchmarks.md
	$(BIN) bench control --write docs/benchmarks.md
	$(BIN) bench agents --write docs/benchmarks.md

clean:
	rm -rf bin web/dist internal/web/dist/app
