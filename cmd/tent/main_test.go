package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestServersStayOut keeps the servers' packages out of tent: each one
// linked in runs its initialisers at every tent start and every sandbox
// init's (tent serve and tent mcp are tent-server's).
func TestServersStayOut(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 {
		t.Fatalf("go list -deps listed %d packages: %q", len(deps), deps)
	}
	banned := []string{
		"github.com/tent-sandbox/tent/serve",
		"github.com/tent-sandbox/tent/mcp",
		"google.golang.org/protobuf/",
		"connectrpc.com/",
		"github.com/modelcontextprotocol/",
		"github.com/google/jsonschema-go/",
		"golang.org/x/net/http2",
	}
	for _, d := range deps {
		for _, b := range banned {
			if d == strings.TrimSuffix(b, "/") || strings.HasPrefix(d, b) {
				t.Errorf("tent links %s (a server's package: it belongs in cmd/tent-server)", d)
			}
		}
	}
}

// TestInitStartsEarly checks where the sandbox init starts in Go's
// package initialisation: it runs from package namespaces' initialiser,
// so every initialiser that runs before it is paid for by every sandbox
// start. The linker orders packages one at a time, each time the first,
// by import path, of those whose imports are all initialised: a
// dependency of namespaces whose path sorts late holds it back behind
// every ready package that sorts before that dependency. Until
// internal/memtrim stopped importing runtime/debug, regexp's and YAML's
// initialisers (about 0.15 ms) ran in every sandbox init. The order is
// read from a built tent (GODEBUG=inittrace=1 prints each initialiser as
// it runs).
func TestInitStartsEarly(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tent")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--version")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tent --version: %v\n%s", err, out)
	}
	pos := map[string]int{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "init" {
			pos[strings.ReplaceAll(f[1], "%2e", ".")] = len(pos)
		}
	}
	const init = "github.com/tent-sandbox/tent/namespaces"
	if _, ok := pos[init]; !ok {
		t.Fatalf("no initialiser of %s in GODEBUG=inittrace=1's output:\n%s", init, out)
	}
	t.Logf("%s is initialised %dth of %d packages with initialisers", init, pos[init]+1, len(pos))
	for _, p := range []string{"regexp", "gopkg.in/yaml.v3", "net", "net/http", "github.com/tent-sandbox/tent/sandbox"} {
		i, ok := pos[p]
		if !ok {
			t.Errorf("%s has no initialiser any more: update this test", p)
			continue
		}
		if i < pos[init] {
			t.Errorf("%s is initialised before %s (%d, %d): every sandbox init runs its initialisers", p, init, i+1, pos[init]+1)
		}
	}
}

// TestStaticBuilds builds tent as make build does (scripts/build), against
// glibc and against musl, and checks what differs between the two C
// libraries: the C constructor that runs before the Go runtime (the idle
// holders, the start stamp of tent run -v) finds argv through the
// constructor's arguments on glibc and through the initial stack on musl,
// which passes constructors none; libseccomp's compiler runs on musl's
// thread stacks, which the binary makes 8 MiB. Without musl-gcc the musl
// case is skipped, unless TENT_REQUIRE_MUSL=1 (CI).
func TestStaticBuilds(t *testing.T) {
	for _, libc := range []string{"glibc", "musl"} {
		t.Run(libc, func(t *testing.T) {
			if libc == "musl" && os.Getenv("TENT_REQUIRE_MUSL") != "1" {
				if _, err := exec.LookPath("musl-gcc"); err != nil {
					t.Skip("no musl-gcc (apt-get install musl-tools gperf)")
				}
			}
			dir := t.TempDir()
			build := exec.Command("../../scripts/build", "tent")
			build.Env = append(os.Environ(), "TENT_LIBC="+libc, "TENT_BIN_DIR="+dir)
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("scripts/build: %v\n%s", err, out)
			}
			bin := filepath.Join(dir, "tent")
			checkStatic(t, bin, libc)

			// argv[0] "tent-idle" with four arguments is the idle holder,
			// which the constructor runs: descriptors that are not numbers
			// end it with ExitProtocol (121) before any Go code runs. Had
			// the constructor misread argv, tent's Go CLI would have
			// refused the command line ("unknown command", 125).
			holder := exec.Command(bin, "a", "b", "c", "d")
			holder.Args[0] = "tent-idle"
			if err := holder.Run(); holder.ProcessState == nil || holder.ProcessState.ExitCode() != 121 {
				t.Errorf("tent-idle a b c d: %v, want exit status 121 (the holder's protocol error)", err)
			}

			// The init's constructor stamps its start: "clone and exec" is
			// the time from the clone to it.
			out, err := exec.Command(bin, "run", "-v", "--", "/bin/true").CombinedOutput()
			if err != nil || !strings.Contains(string(out), `"clone and exec"=`) || !strings.Contains(string(out), `"runtime start and initialisers"=`) {
				t.Errorf("tent run -v -- /bin/true: %v, want the constructors' stamps:\n%s", err, out)
			}

			// A custom profile is compiled by libseccomp in the CLI.
			profile, err := filepath.Abs("../../seccomp/testdata/docker-default.json")
			if err != nil {
				t.Fatal(err)
			}
			out, err = exec.Command(bin, "run", "--seccomp", profile, "--", "sh", "-c", "grep '^Seccomp:' /proc/self/status").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "Seccomp:\t2") {
				t.Errorf("tent run --seccomp %s: %v, want a filtered command:\n%s", profile, err, out)
			}
		})
	}
}

// checkStatic checks that bin has no program interpreter (no ld.so) and,
// built against musl, asks for 8 MiB thread stacks.
func checkStatic(t *testing.T, bin, libc string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		switch {
		case p.Type == elf.PT_INTERP:
			t.Errorf("%s has a program interpreter: not static", bin)
		case p.Type == elf.PT_GNU_STACK && libc == "musl" && p.Memsz != 8<<20:
			t.Errorf("%s's PT_GNU_STACK size is %d, want %d (musl's thread stacks)", bin, p.Memsz, 8<<20)
		}
	}
}
