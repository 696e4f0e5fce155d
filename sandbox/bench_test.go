package sandbox_test

import (
	"context"
	"os/exec"
	"testing"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
)

// BenchmarkRunTrue measures a whole sandbox (all namespaces, cgroup when
// available, Landlock, seccomp) around /bin/true, from the library.
func BenchmarkRunTrue(b *testing.B) {
	for b.Loop() {
		if err := sandbox.Command(context.Background(), sandbox.Spec{}, "/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunTrueHostNet is the same without a network namespace.
func BenchmarkRunTrueHostNet(b *testing.B) {
	for b.Loop() {
		if err := sandbox.Command(context.Background(), sandbox.Spec{Network: sandbox.NetworkPolicy{Mode: netpolicy.Host}}, "/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHostTrue is the baseline: /bin/true through os/exec.
func BenchmarkHostTrue(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}
