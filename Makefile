# bootstick. `make iso` builds the default image; `make test` runs every test.
#
# Everything built from source lands in a cache outside the clone, so a fresh
# clone on a machine that has built before is fast. Override with CACHE=DIR.
CACHE ?= /var/cache/bootstick
OUT   ?= out

# The toolchain builds with these flags too (internal/gobuild), so a rebuilt
# binary, a test and `go build` of the mains all hit one Go build cache.
export CGO_ENABLED := 0
export GOFLAGS     := -trimpath -buildvcs=false
export BOOTSTICK_CACHE := $(abspath $(CACHE))

GO        ?= go
# The version both programs print (`mkusb version`, `firstboot version`).
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GOTEST    := $(GO) test -count=1
MKUSB     := bin/mkusb
FIRSTBOOT := bin/firstboot

.PHONY: all build deps toolchain iso test test-short bench e2e manifests vet fmt clean FORCE

all: build

build: $(MKUSB) $(FIRSTBOOT)

bin/%: FORCE
	$(GO) build -ldflags "-X github.com/bootstick/bootstick/internal/cli.Version=$(VERSION)" -o $@ ./cmd/$*

# The Debian packages the build and the tests use: installs what is missing
# (as root), names every missing package at once, silent when all are there.
deps:
	@bash .ci/install-deps

# Kubernetes, etcd, CoreDNS and pause from pinned Go modules, and the images
# kubeadm pulls, into $(CACHE). Cold: about 20 minutes on 2 cores; warm: seconds.
toolchain: deps $(MKUSB)
	$(MKUSB) toolchain --cache $(CACHE)

iso: deps toolchain $(FIRSTBOOT)
	$(MKUSB) build --cache $(CACHE) --output $(OUT)/bootstick.iso

# Every tier: unit, real etcd and kube-apiserver, real kubeadm on this host
# and the virtual hosts of the host-mode journeys; then the four-mode smoke
# boot of the ISO in QEMU, not beside the journeys' TCG guests (twice its
# guest kernel crashed under that load); then, alone on the machine (a TCG
# guest needs both cores), qemu-test's scenario 1: the real stick cold booted
# in QEMU through a whole first boot (about 20 minutes under TCG).
# Integration tests read the toolchain from $(CACHE). `make e2e` runs the
# other scenarios.
test: deps toolchain
	$(GOTEST) -timeout 60m $$($(GO) list ./... | grep -v '/qemu-test\|/internal/qemu$$')
	$(GOTEST) -timeout 30m ./internal/qemu/
	$(GOTEST) -v -timeout 50m ./qemu-test/...

# Unit tests only: no toolchain, no root, no network.
test-short:
	$(GOTEST) -short ./...

# Every figure bootstick promises, measured against its reference side by
# side in one run (internal/benchtable): the registry against a raw read and
# distribution v3, the boot-time bundle check against sha256sum, rebuilds
# against a cold build, the ISO writer against xorriso, the ISO's size by
# part, firstboot against bare kubeadm, and 10 and 100 hosts provisioned
# through the real BMO and Ironic on fake hardware. One package at a time
# (they share this machine); the table goes to $(OUT)/bench.txt, the raw
# `go test` output to $(OUT)/bench-raw.txt. Root: it drops the page cache
# and brings this host up as a node.
bench: deps toolchain iso
	@mkdir -p $(OUT)
	@rm -f $(OUT)/bench-rows.jsonl
	BOOTSTICK_BENCH_ROWS=$(abspath $(OUT))/bench-rows.jsonl $(GO) test -p 1 -run '^$$' -bench . -benchtime 1x -timeout 60m ./... > $(OUT)/bench-raw.txt 2>&1 || { tail -40 $(OUT)/bench-raw.txt; exit 1; }
	$(GO) run ./internal/benchtable/cmd/benchtable $(OUT)/bench-rows.jsonl | tee $(OUT)/bench.txt

e2e: deps toolchain
	$(GOTEST) -tags e2e -v -timeout 150m -run 'TestHostProvisionTwo$$|TestAppClusterTwo$$|TestBMOFirmwareDefectAvoided$$' ./internal/firstboot/
	$(GOTEST) -tags e2e -timeout 240m ./qemu-test/...

# Regenerate the metal3 and BPA CRDs (and the BPA deepcopy code) with the
# pinned controller-gen; a test fails when they are stale.
manifests:
	bash manifests/generate.sh

vet:
	$(GO) vet ./...

fmt:
	gofmt -l -w $$(git ls-files '*.go')

clean:
	rm -rf bin $(OUT)
