# raftq developer entry points.
#   make run    build and start a 3-node cluster on loopback (Ctrl-C stops it)
#   make test   lint and run every test with the race detector
GO ?= go
BIN := bin
GOBIN_DIR := $(shell $(GO) env GOPATH)/bin
export PATH := $(GOBIN_DIR):$(PATH)
STATICCHECK_VERSION := v0.8.2
BUF_VERSION := v1.75.0

.PHONY: all build proto test test-go lint run clean

all: build

build:
	# -buildvcs=auto overrides a GOFLAGS=-buildvcs=false in the environment so
	# --version, raftq_build_info and bench reports name the commit they
	# came from (auto: none outside git).
	CGO_ENABLED=0 $(GO) build -buildvcs=auto -o $(BIN)/raftq-node ./cmd/node
	CGO_ENABLED=0 $(GO) build -buildvcs=auto -o $(BIN)/raftq ./cmd/raftq
	CGO_ENABLED=0 $(GO) build -buildvcs=auto -o $(BIN)/raftq-bench ./cmd/bench

run: build
	./scripts/run-cluster.sh

proto:
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
	protoc -I . --go_out=. --go_opt=paths=source_relative fsm/fsmpb/fsm.proto
	protoc -I . --go_out=. --go_opt=paths=source_relative meta/metapb/meta.proto
	protoc -I . --go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative api/raftqv1/raftq.proto
	protoc -I . --go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative peer/peerpb/peer.proto

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	@# Shell scripts: warnings and errors. CI (RAFTQ_STRICT_FAULTS=1)
	@# installs shellcheck and may not skip it.
	@if command -v shellcheck >/dev/null; then shellcheck -S warning -x $$(git ls-files '*.sh') .ci/run; \
	elif [ "$${RAFTQ_STRICT_FAULTS:-}" = 1 ]; then echo "lint: shellcheck missing"; exit 1; \
	else echo "lint: shellcheck not installed; shell scripts not checked"; fi

# The system tests (real node processes, ~15 minutes) start at once beside
# the other packages rather than after them: go test would otherwise run
# them last, and the suite's wall time would be their time plus most of the
# rest. The other packages run one at a time (-p 1), so two test binaries
# share the two cores, as under go test's default. Both runs finish before
# the target's status is known.
test-go:
	@$(GO) test -race -count=1 -timeout 25m ./systest/... & sys=$$!; \
	$(GO) test -race -count=1 -p 1 -timeout 25m $$($(GO) list ./... | grep -v '/systest'); rest=$$?; \
	wait $$sys; sysrc=$$?; \
	if [ $$rest != 0 ] || [ $$sysrc != 0 ]; then echo "test-go FAILED (other packages: exit $$rest, systest: exit $$sysrc)" >&2; exit 1; fi

# fault-prereqs first: it names the fault suites that will skip here (and
# fails at once under RAFTQ_STRICT_FAULTS=1, where they may not skip).
test: fault-prereqs lint api-check test-go compose-smoke jepsen-smoke

# buf lint and breaking-change check of the public API, api/, against the
# previous commit (scripts/api-check.sh; rules in docs/api.md). buf is
# installed pinned into $(GOBIN_DIR) unless that version is already there.
.PHONY: api-check
api-check:
	@$(GOBIN_DIR)/buf --version 2>/dev/null | grep -qx '$(patsubst v%,%,$(BUF_VERSION))' || \
		GOBIN=$(GOBIN_DIR) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	BUF=$(GOBIN_DIR)/buf scripts/api-check.sh

.PHONY: fault-prereqs
fault-prereqs:
	@scripts/fault-prereqs.sh

clean:
	rm -rf $(BIN)

# Scale model (issue #29; docs/benchmarks.md, "Scale model"): the headline
# workload on 3, 6 and 9 nodes (1, 2, 3 shards), each grown online from
# the one before, every node capped at CAP cores by a cgroup. Needs root
# (cgroups) and jq; 10-15 minutes with the defaults. STAGES, REPEATS, DURATION,
# CAP, PERIOD_US, OUT, BENCH_ARGS: see scripts/scale-model.sh.
.PHONY: scale-model
scale-model: build
	scripts/scale-model.sh

# Containers (docker/, docs/deploy.md). No registry is needed: the image is
# FROM scratch with binaries built on the host.
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
COMPOSE_PROJECT ?= raftq
.PHONY: docker-image compose-up compose-down compose-add-node compose-remove-node compose-smoke
docker-image:
	GO=$(GO) docker/build-image.sh raftq:dev
# The cluster runs with TLS from a development CA (docker/compose.yaml);
# its certificate is copied to data/compose-ca.crt for the host CLI.
compose-up: docker-image
	$(COMPOSE) -p $(COMPOSE_PROJECT) -f docker/compose.yaml up -d
	mkdir -p data && c="$$($(COMPOSE) -p $(COMPOSE_PROJECT) -f docker/compose.yaml ps -a -q certs)" && \
		docker cp "$$c":/certs/ca.crt data/compose-ca.crt && \
		docker cp "$$c":/certs/client-admin.crt data/compose-client-admin.crt && \
		docker cp "$$c":/certs/client-admin.key data/compose-client-admin.key
	@echo "compose: TLS and client certificates on; the CLI on this host needs:"
	@echo "  export RAFTQ_ADDR=127.0.0.1:17101 RAFTQ_CA=$$PWD/data/compose-ca.crt RAFTQ_CERT=$$PWD/data/compose-client-admin.crt RAFTQ_KEY=$$PWD/data/compose-client-admin.key"
# The profiles take the added nodes (n4, n5) down too.
compose-down:
	$(COMPOSE) -p $(COMPOSE_PROJECT) -f docker/compose.yaml --profile n4 --profile n5 down
# N=4 or 5 joins node nN to the running cluster; remove drains any node
# (raftq cluster remove-node --wait), then deletes its container and volume.
compose-add-node:
	@test -n "$(N)" || { echo "usage: make compose-add-node N=4" >&2; exit 2; }
	RAFTQ_PROJECT=$(COMPOSE_PROJECT) docker/cluster.sh add $(N)
compose-remove-node:
	@test -n "$(N)" || { echo "usage: make compose-remove-node N=4" >&2; exit 2; }
	RAFTQ_PROJECT=$(COMPOSE_PROJECT) docker/cluster.sh remove $(N)
# Screenshots of every console page for docs/console.md, taken by the
# browser test (console/browser_test.go: a real 3-node TLS cluster driven
# in headless Chromium, /usr/bin/chromium).
.PHONY: console-shots
console-shots:
	RAFTQ_CONSOLE_SHOTS=$(CURDIR)/docs/console $(GO) test -count=1 -run '^TestBrowser$$' ./console/

# Prints "skipped: no Docker engine" and succeeds when no engine answers;
# fails instead under RAFTQ_STRICT_FAULTS=1 (.ci/run sets it).
compose-smoke:
	timeout -k 30 300 docker/smoke.sh

# jepsen-lite smoke (docs/jepsen.md): every workload under every fault
# kind, in private network namespaces (needs root, iproute2, iptables;
# installed here when missing). Bounded to 7.5 minutes; SEED replays a
# schedule. JEPSEN_TIME covers the schedule's worst case for the eight
# kinds to each fire once (8 gaps of 5 s and 7 holds of 8 s: 96 s) plus
# 90 s for the faults' own work (a rolling restart, a repair, a node
# replaced: its every replica moved, the shard count grown: its slots
# moved); a kind that never fires makes the run INVALID
# (jepsen-lite/smoke_test.go checks the sum).
# Prints "skipped: needs root" and succeeds when not root; fails instead
# under RAFTQ_STRICT_FAULTS=1 (.ci/run sets it).
JEPSEN_SEED ?= 1
JEPSEN_TIME ?= 190s
.PHONY: jepsen-smoke
jepsen-smoke:
	@if [ "$$(id -u)" != 0 ]; then \
		if [ "$$RAFTQ_STRICT_FAULTS" = 1 ]; then echo "jepsen-smoke FAILED: needs root (network namespaces) and RAFTQ_STRICT_FAULTS=1 forbids skipping it" >&2; exit 1; fi; \
		echo "jepsen-smoke skipped: needs root (network namespaces)"; exit 0; \
	fi; \
	need=""; command -v ip >/dev/null || need="$$need iproute2"; command -v iptables >/dev/null || need="$$need iptables"; \
	if [ -n "$$need" ]; then DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$need; fi; \
	CGO_ENABLED=0 $(GO) build -o $(BIN)/raftq-node ./cmd/node && \
	timeout -k 30 450 $(GO) run ./jepsen-lite --workload all --nemesis all --time $(JEPSEN_TIME) --seed $(JEPSEN_SEED) --bin $(BIN)/raftq-node
