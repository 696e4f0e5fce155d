//go:build ignore

// gen_default writes default_amd64.bpf: the built-in profile compiled for
// x86-64, so that starting a sandbox does not pay for libseccomp's
// compiler (5-8 ms). Run `go generate ./seccomp` after changing Default;
// TestEmbeddedDefaultIsCurrent fails until then.
package main

import (
	"log"
	"os"

	"github.com/tent-sandbox/tent/seccomp"
)

func main() {
	p, err := seccomp.Compile(seccomp.Default())
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("default_amd64.bpf", p.Marshal(), 0o644); err != nil {
		log.Fatal(err)
	}
}
