# tent — build, test, bench. Every target runs scripts/setup first, which
# installs missing system packages when run as root (apt) or says what to
# install otherwise.
GO ?= go
BIN := bin/tent
SERVER := bin/tent-server

# bin/tent is the sandbox CLI; bin/tent-server (beside it) serves E2B's
# API and MCP, and tent runs it for tent serve and tent mcp (the servers'
# packages stay out of every tent start). scripts/build links both
# statically (libseccomp.a, netgo, osusergo): they run on any x86-64
# Linux, need no ld.so inside the sandbox when re-executed, and start
# faster (fewer page faults); against musl where scripts/musl can prepare
# it (no cpuid probes at each start), else glibc.

.PHONY: all setup build static test test-root test-unprivileged test-oci test-cri k8s-tools containerd2 lint bench clean

all: build

setup:
	@./scripts/setup

build: setup
	GO=$(GO) ./scripts/build

static: build

STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
# The module's packages, without the VM harness's copy of the tree in bin/.
PKGS = $$($(GO) list ./... | grep -v '/bin/')

# The library also builds without cgo (no libseccomp: custom seccomp
# profiles are refused) and, for programs that import it, on macOS
# (what needs a sandbox fails with sandbox.ErrUnsupported): see
# docs/library.md.
lint: setup
	@test -z "$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go'); exit 1; }
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)
	CGO_ENABLED=0 $(GO) build $(PKGS)
	GOOS=darwin $(GO) vet ./sandbox/...
	GOOS=darwin $(GO) build -o /dev/null ./cmd/tent
	GOOS=darwin $(GO) build -o /dev/null ./cmd/tent-server

# The README's test command: lint, the whole suite as the current user
# (root in CI) with the race detector, then the integration tests again
# as an unprivileged user.
test: lint test-root test-unprivileged

test-root: setup
	$(GO) test -race -count=1 -timeout 15m $(PKGS)

test-unprivileged: setup
	./scripts/test-unprivileged

# tent as an OCI runtime (package oci, docs/oci.md): a containerd of the
# tests' own runs containers through its stock runc shim with tent-runc
# (the static bin/tent behind a symlink) as the runtime binary; as root.
# scripts/setup-oci installs containerd, runc and busybox-static; the
# propagation test (a bundle under a shared /) needs that busybox too,
# so it runs here, where it cannot skip.
# Kubernetes' node stack, pinned (containerd 2, runc 1.5, crictl, critest),
# built into bin/k8s by scripts/k8s-tools (about 6 minutes, once; not in
# CI). Where bin/k8s has a containerd, test-oci, test-cri and bench run
# on it (first on PATH) rather than on the system's containerd 1.6, and
# bench's CRI pod start has runc 1.5 for its baseline. `make containerd2`
# puts only containerd 2 there, Debian testing's package (checked against
# the archive's signature), in seconds: CI's way onto containerd 2.
K8S := $(CURDIR)/bin/k8s
K8S_PATH := $(if $(wildcard bin/k8s/containerd),PATH=$(K8S):$$PATH) $(if $(wildcard bin/k8s/cni/portmap),TENT_CNI_BIN=$(K8S)/cni)
k8s-tools:
	./scripts/k8s-tools $(K8S)
containerd2:
	./scripts/containerd2 $(K8S)

test-oci: build
	./scripts/setup-oci
	$(K8S_PATH) TENT_BINARY=$(CURDIR)/$(BIN) TENT_REQUIRE_OCI=1 $(GO) test -count=1 -timeout 5m -run 'Containerd|SharedMountsStayOutOfTheHost' ./oci/

# The CRI path kubelet uses, through containerd's CRI plugin with a
# "tent" runtime handler: crictl (built once into bin/ from
# sigs.k8s.io/cri-tools; the Go module proxy serves it) runs a pod of
# two containers. The first build fetches and compiles cri-tools (a few
# minutes); the test itself takes seconds.
CRICTL_VERSION := v1.34.0
bin/crictl:
	GOBIN=$(CURDIR)/bin $(GO) install sigs.k8s.io/cri-tools/cmd/crictl@$(CRICTL_VERSION)

# It also runs an ordinary Debian image's nginx, redis and postgres as a
# pod (TestCRIDebianImage), made by scripts/debian-image into
# bin/images once (mmdebstrap, about 35 s).
test-cri: build bin/crictl
	./scripts/setup-oci
	./scripts/debian-image bin/images/debian.tar
	$(K8S_PATH) TENT_BINARY=$(CURDIR)/$(BIN) TENT_CRICTL=$(CURDIR)/bin/crictl TENT_DEBIAN_IMAGE=$(CURDIR)/bin/images/debian.tar TENT_REQUIRE_OCI=1 $(GO) test -count=1 -timeout 5m -run 'CRI' ./oci/

# BEFORE=path/to/an/older/tent adds its `tent run` to the start-up
# comparison, interleaved with the others: a before/after ratio in one run.
bench: build
	$(GO) run ./internal/benchcmp -tent $(BIN) $(if $(BEFORE),-before $(BEFORE))
	$(GO) test -run '^$$' -bench 'RunTrue|HostTrue|ExecLatency|ProvisionTerminate|Limited' -benchtime 20x ./sandbox/
	$(GO) test -run '^$$' -bench 'Transparent' -benchtime 5x ./sandbox/
	$(GO) test -run '^$$' -bench 'IdleMemory' -benchtime 1x ./sandbox/
	TENT_BINARY=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench 'CLIIdleMemory' -benchtime 1x ./cmd/tent/cli/
	$(GO) test -run '^$$' -bench 'Connect|Intercept' -benchtime 20x ./netpolicy/
	$(GO) test -run '^$$' -bench 'ProxySlowHeadersMemory|DenialsMemory' -benchtime 1x ./netpolicy/
	$(GO) test -run '^$$' -bench 'Pipe100MB' -benchtime 10x ./cmd/tent/cli/
	$(GO) test -run '^$$' -bench 'E2BSDK|CodeInterpreterSDK' -benchtime 1x ./serve/
	TENT_BINARY=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench 'MCPExec' -benchtime 1x ./cmd/tent/cli/
	$(K8S_PATH) TENT_BINARY=$(CURDIR)/$(BIN) $(GO) test -run '^$$' -bench 'CtrRun' -benchtime 20x ./oci/
	$(K8S_PATH) TENT_BINARY=$(CURDIR)/$(BIN) $(if $(wildcard bin/crictl),TENT_CRICTL=$(CURDIR)/bin/crictl) $(GO) test -run '^$$' -bench 'CRIPodStart' -benchtime 15x ./oci/

clean:
	rm -rf bin

# The integration tests in a VM (scripts/vm/): Debian's 6.1 kernel under
# qemu with software emulation (no KVM needed), pure cgroup v2, a systemd-
# like cgroup tree; runs the sandbox, CLI and cgroups tests as root (with
# /tmp on ext4, then on tmpfs), as a user with a delegated cgroup and as one
# without, plus CLI checks of those set-ups. Fails when a test fails or the
# VM does not finish. Settings (VM_RUNS, VM_FLAGS, ...): see scripts/vm/run.
.PHONY: test-vm
test-vm: setup
	./scripts/vm/setup
	./scripts/vm/build-initramfs
	./scripts/vm/run

# make bench's start-up comparison in that VM (pure cgroup v2, Debian's
# 6.1), as root and as a user with a delegated cgroup: ratios only (the
# VM runs under software emulation).
.PHONY: bench-vm
bench-vm: setup
	./scripts/vm/setup
	./scripts/vm/build-initramfs
	VM_RUNS=bench ./scripts/vm/run
