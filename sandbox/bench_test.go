package sandbox_test

import (
	"bytes"
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
		if err := sandbox.Command(context.Background(), sandbox.Spec{Networking: sandbox.Networking{Network: sandbox.NetworkPolicy{Mode: netpolicy.Host}}}, "/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunTrueLimited is the same in limited mode: the proxy's
// listeners, and the transparent path's routes, stub DNS and catching
// listeners (three ports here: 22, 80 and 443), set up and torn down.
func BenchmarkRunTrueLimited(b *testing.B) {
	spec := sandbox.Spec{Networking: sandbox.Networking{Network: sandbox.NetworkPolicy{Mode: netpolicy.Limited, AllowedHosts: []string{"example.com"}}}}
	for b.Loop() {
		if err := sandbox.Command(context.Background(), spec, "/bin/true").Run(); err != nil {
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

// BenchmarkWriteFile measures WriteFile of 16 MiB from a reader (not a
// file: the input is framed, see Sandbox.WriteFile) over a file of a
// Local sandbox.
func BenchmarkWriteFile(b *testing.B) {
	l, err := sandbox.NewLocal(sandbox.LocalOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close(context.Background())
	info, err := l.Provision(context.Background(), sandbox.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	h, err := l.Open(context.Background(), info.ID)
	if err != nil {
		b.Fatal(err)
	}
	content := bytes.Repeat([]byte("0123456789abcdef"), 1<<20)
	b.SetBytes(int64(len(content)))
	for b.Loop() {
		if _, err := h.WriteFile(context.Background(), "/tmp/f", bytes.NewReader(content), sandbox.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
