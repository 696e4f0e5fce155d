//go:build linux

package seccomp_test

import (
	"fmt"
	"os"
	"runtime"
	"syscall"

	"github.com/tent-sandbox/tent/seccomp"
	"golang.org/x/sys/unix"
)

// The host compiles the profile once and sends the bytes to the sandbox's
// init, which decodes them.
func Example() {
	prog, err := seccomp.Compile(seccomp.Default())
	if err != nil {
		fmt.Println(err)
		return
	}
	wire := prog.Marshal() // sent over the control socket

	received, err := seccomp.UnmarshalProgram(wire)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(len(received) == len(prog))
	// Output: true
}

// In the child that is about to become the sandboxed command: lock the
// thread, set no_new_privs, install, exec. This runs in a re-exec'd
// process, never in the host, as the filter cannot be removed.
func ExampleProgram_Install() {
	prog, err := seccomp.Compile(seccomp.Default())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(125)
	}
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "failed to set no_new_privs:", err)
		os.Exit(125)
	}
	if err := prog.Install(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(125)
	}
	err = syscall.Exec("/bin/sh", []string{"sh", "-c", "echo sandboxed"}, os.Environ())
	fmt.Fprintln(os.Stderr, "exec:", err)
	os.Exit(126)
}

// Docker's and other OCI profiles load unchanged.
func ExampleLoad() {
	p, err := seccomp.Load("testdata/docker-default.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.DefaultAction)
	// Output: SCMP_ACT_ERRNO
}
