package envd

// The Go code of the two services is generated from proto/*.proto by
// protoc 3.21 (Debian's protobuf-compiler) with protoc-gen-go v1.36.12
// (google.golang.org/protobuf/cmd/protoc-gen-go) and
// protoc-gen-connect-go v1.21.1 (connectrpc.com/connect/cmd/protoc-gen-connect-go),
// both installed with go install and on PATH; the generated packages are
// committed.
//go:generate protoc -I proto -I /usr/include --go_out=../.. --go_opt=module=github.com/tent-sandbox/tent --connect-go_out=../.. --connect-go_opt=module=github.com/tent-sandbox/tent process.proto filesystem.proto
