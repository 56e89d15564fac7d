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

# .ci/go-build counts the packages a first build compiles (minutes on a
# fresh machine), and is silent on a warm one.
bin/%: FORCE
	@GO=$(GO) bash .ci/go-build $@ ./cmd/$* -ldflags "-X github.com/bootstick/bootstick/internal/cli.Version=$(VERSION)"

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

# Every test, in tiers (.ci/test-tiers), one line per tier with its time:
# first it clears what an earlier, killed run left (and says so); then the
# unit and API tier (real etcd and kube-apiserver, the real toolchain) in
# parallel; then the journeys one package at a time, each with its own
# -timeout, since a TCG guest needs both cores: the virtual site's BMC,
# the compute image's BIOS and UEFI boots, host mode (a UEFI Redfish
# DHCP host provisioned and installed by the BPA, kind mode), the
# four-mode smoke boot, and qemu-test's scenario 1 (the real stick cold
# booted in QEMU until its own cluster is up, its data disk sealed).
# Integration tests read the toolchain from $(CACHE). `make e2e` runs
# Journey A (every host shape and fault in host mode), the application
# cluster formed on that host (TestAppClusterDHCPClock), scenario 1 to a
# done first boot and the other scenarios.
test: deps toolchain
	GO=$(GO) OUT=$(OUT) bash .ci/test-tiers

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

# Host mode's journeys one at a time, each with its own -timeout: the
# application cluster's day 2 alone takes 2 to 3 hours under TCG.
E2E_HOST := TestHostProvision TestHostProvisionTwo TestExampleSiteDHCPTwoNICClock TestAppClusterDHCPClock \
            TestThreeMastersVIPFirstPoweredOff TestKubectlPathDHCP TestBMOFirmwarePathSafe

e2e: deps toolchain
	set -e; for j in $(E2E_HOST); do $(GOTEST) -tags e2e -v -timeout 200m -run "^$$j\$$" ./internal/firstboot/; done
	$(GOTEST) -tags e2e -timeout 300m ./qemu-test/...

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
