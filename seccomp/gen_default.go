//go:build ignore

// gen_default writes default_amd64.bpf, the built-in profile compiled for
// x86-64, and guard*_amd64.bpf, the four guard profiles (named as
// guardFile names them), so that starting a sandbox does not pay for
// libseccomp's compiler (5-8 ms) and a build without cgo still has them.
// Run `go generate ./seccomp` after changing Default or GuardProfile;
// TestEmbeddedDefaultIsCurrent and TestEmbeddedGuardsAreCurrent fail
// until then.
package main

import (
	"log"
	"os"

	"github.com/tent-sandbox/tent/seccomp"
)

func main() {
	write("default_amd64.bpf", seccomp.Default())
	for _, net := range []bool{false, true} {
		for _, ipc := range []bool{false, true} {
			name := "guard"
			if net {
				name += "_net"
			}
			if ipc {
				name += "_ipc"
			}
			write(name+"_amd64.bpf", seccomp.GuardProfile(seccomp.Guard{NoNetwork: net, NoIPC: ipc}))
		}
	}
}

func write(name string, p *seccomp.Profile) {
	prog, err := seccomp.Compile(p)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(name, prog.Marshal(), 0o644); err != nil {
		log.Fatal(err)
	}
}
