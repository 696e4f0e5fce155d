package oci_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A container's process and an exec'd one, with an argument and an
// environment variable each of a unique value, run through tent-runc's
// create, start and exec --detach: at no moment does any process but
// the container's own commands (tent-runc itself, its supervisor, its
// exec helper, the sandbox's init) show one of those values in its
// /proc/PID/cmdline, which every local user reads, or its
// /proc/PID/environ. /proc is scanned without pause from before create
// to the container's end, and at fixed points: while the exec'd
// process runs (its helper waits for it then), after it ended, after
// the container ended. The values reach the commands (they print
// them). Without TENT_BINARY the test binary is tent (TestMain).
func TestLaunchKeepsProcessOffCmdline(t *testing.T) {
	need(t, lookPath("busybox"), "busybox missing (apt-get install busybox-static)")
	if out, _ := exec.Command("file", "-L", mustLookPath(t, "busybox")).Output(); !bytes.Contains(out, []byte("statically linked")) && !bytes.Contains(out, []byte("static-pie")) {
		need(t, false, "busybox is not static (apt-get install busybox-static)")
	}
	runc := tentRunc(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	m := markers{}
	for _, name := range []string{"main arg", "main env", "exec arg", "exec env"} {
		m[name] = newMarker(t)
	}
	bundle := filepath.Join(dir, "bundle")
	writeRootfs(t, filepath.Join(bundle, "rootfs"))
	// Each command prints its argument and variable, then waits for its
	// stdin to end.
	script := `echo "$1 $TENT_TEST_SECRET"; read line || true`
	proc := func(arg, env string) map[string]any {
		return map[string]any{"args": []string{"sh", "-c", script, "sh", arg}, "cwd": "/",
			"env": []string{"PATH=/bin", "TENT_TEST_SECRET=" + env}, "user": map[string]int{"uid": 0, "gid": 0}}
	}
	writeJSON(t, filepath.Join(bundle, "config.json"), map[string]any{"ociVersion": "1.0.2", "root": map[string]any{"path": "rootfs"},
		"process": proc(m["main arg"], m["main env"]),
		"linux":   map[string]any{"namespaces": []map[string]string{{"type": "pid"}, {"type": "mount"}, {"type": "network"}}}})
	procFile := filepath.Join(dir, "process.json")
	writeJSON(t, procFile, proc(m["exec arg"], m["exec env"]))

	// The supervisor and the exec helper are left to create's and exec's
	// parent, a subreaper, as containerd's shim is: this process.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	sc := startScanner(m)
	defer sc.stop()
	var supervisor, helper int
	t.Cleanup(func() {
		// After a failure: end what is left.
		_ = exec.Command(runc, "--root", root, "delete", "--force", "c1").Run()
		for _, pid := range []int{supervisor, helper} {
			if pid > 0 {
				_ = unix.Kill(pid, unix.SIGKILL)
				reap(t, pid)
			}
		}
	})

	mainIn, mainOut := pipes(t)
	errLog := filepath.Join(dir, "create.err")
	stderr, err := os.Create(errLog)
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	create := exec.Command(runc, "--root", root, "create", "--bundle", bundle, "--pid-file", filepath.Join(dir, "c1.pid"), "c1")
	create.Stdin, create.Stdout, create.Stderr = mainIn.r, mainOut.w, stderr
	if err := create.Run(); err != nil {
		data, _ := os.ReadFile(errLog)
		t.Fatalf("create: %v %s", err, data)
	}
	var initPid int
	initPid, supervisor = containerPids(t, root, "c1", filepath.Join(dir, "c1.pid"))
	t.Cleanup(func() {
		_ = unix.Kill(initPid, unix.SIGKILL)
		_, _ = unix.Wait4(initPid, nil, unix.WNOHANG, nil)
	})
	mainIn.r.Close()
	mainOut.w.Close()
	if out, err := exec.Command(runc, "--root", root, "start", "c1").CombinedOutput(); err != nil {
		t.Fatalf("start: %v %s", err, out)
	}
	mainOut.wantLine(t, "the container's process", m["main arg"]+" "+m["main env"])

	execIn, execOut := pipes(t)
	ex := exec.Command(runc, "--root", root, "exec", "--detach", "--process", procFile, "--pid-file", filepath.Join(dir, "exec.pid"), "c1")
	ex.Stdin, ex.Stdout, ex.Stderr = execIn.r, execOut.w, stderr
	if err := ex.Run(); err != nil {
		data, _ := os.ReadFile(errLog)
		t.Fatalf("exec --detach: %v %s", err, data)
	}
	helper = readPid(t, filepath.Join(dir, "exec.pid"))
	execIn.r.Close()
	execOut.w.Close()
	execOut.wantLine(t, "the exec'd process", m["exec arg"]+" "+m["exec env"])
	// The exec is in flight: its helper waits for the process, which
	// waits for its stdin.
	sc.check(t, "while the exec'd process runs")

	execIn.w.Close()
	if code := reap(t, helper); code != 0 {
		t.Errorf("the exec helper exited %d, want the process's 0", code)
	}
	helper = 0
	sc.check(t, "after the exec'd process ended")

	mainIn.w.Close()
	if code := reap(t, initPid); code != 0 {
		t.Errorf("the container's init exited %d, want its process's 0", code)
	}
	if code := reap(t, supervisor); code != 0 {
		t.Errorf("the supervisor exited %d, want the container's process's 0", code)
	}
	supervisor = 0
	sc.check(t, "after the container ended")
	if out, err := exec.Command(runc, "--root", root, "delete", "c1").CombinedOutput(); err != nil {
		t.Errorf("delete: %v %s", err, out)
	}
	sc.stop()
	sc.check(t, "at any moment from create to delete")
	if sc.count() < 4 {
		t.Errorf("%d scans of /proc, want at least the 4 fixed ones", sc.count())
	}
}

// tentRunc is a tent-runc symlink to $TENT_BINARY, or else to the test
// binary (see TestMain).
func tentRunc(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("TENT_BINARY")
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			t.Fatal(err)
		}
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "tent-runc")
	if err := os.Symlink(abs, link); err != nil {
		t.Fatal(err)
	}
	return link
}

func mustLookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newMarker(t *testing.T) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "tentmark" + hex.EncodeToString(b)
}

// containerPids reads a created container's pid from pidFile and checks
// that it is the container's (runc's contract, which the shim relies
// on): in the container's pid and mount namespaces (entered by that pid)
// and listed by ps. It returns it and the supervisor's pid (state.json's):
// both are left to create's parent, a subreaper, to reap.
func containerPids(t *testing.T, root, id, pidFile string) (initPid, supervisor int) {
	t.Helper()
	initPid = readPid(t, pidFile)
	data, err := os.ReadFile(filepath.Join(root, id, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Pid        int `json:"pid"`
		Supervisor int `json:"supervisor"`
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Pid != initPid || rec.Supervisor <= 0 || rec.Supervisor == initPid {
		t.Fatalf("state.json: pid %d, supervisor %d; want the pid file's %d and another", rec.Pid, rec.Supervisor, initPid)
	}
	for _, ns := range []string{"pid", "mnt", "user"} {
		inside, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", initPid, ns))
		ours, err2 := os.Readlink("/proc/self/ns/" + ns)
		if err1 != nil || err2 != nil || inside == ours {
			t.Errorf("the pid file's %d: %s namespace %q (%v), this process's %q (%v): want the container's own", initPid, ns, inside, err1, ours, err2)
		}
	}
	return initPid, rec.Supervisor
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(string(data))
	if err != nil || pid <= 0 {
		t.Fatalf("%s holds %q", path, data)
	}
	return pid
}

// pipe is an os.Pipe; the test keeps one end and hands the other to a
// command (and closes its copy).
type pipe struct {
	r, w *os.File
	br   *bufio.Reader
}

// pipes makes a command's stdin and stdout.
func pipes(t *testing.T) (in, out *pipe) {
	t.Helper()
	in, out = &pipe{}, &pipe{}
	var err error
	for _, p := range []*pipe{in, out} {
		if p.r, p.w, err = os.Pipe(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.r.Close(); p.w.Close() })
	}
	out.br = bufio.NewReader(out.r)
	return in, out
}

// wantLine reads a line from the pipe (waiting at most a minute, so that
// a broken exec fails rather than hangs) and wants it to be line.
func (p *pipe) wantLine(t *testing.T, what, line string) {
	t.Helper()
	_ = p.r.SetReadDeadline(time.Now().Add(time.Minute))
	got, err := p.br.ReadString('\n')
	if err != nil || got != line+"\n" {
		t.Fatalf("%s printed %q (%v), want %q", what, got, err, line)
	}
}

// reap waits for this process's child pid (at most a minute, then
// kills it) and returns its exit status (128+N after signal N).
func reap(t *testing.T, pid int) int {
	t.Helper()
	done := make(chan unix.WaitStatus, 1)
	go func() {
		var ws unix.WaitStatus
		for {
			_, err := unix.Wait4(pid, &ws, 0, nil)
			if err != unix.EINTR {
				done <- ws
				return
			}
		}
	}()
	var ws unix.WaitStatus
	select {
	case ws = <-done:
	case <-time.After(time.Minute):
		_ = unix.Kill(pid, unix.SIGKILL)
		ws = <-done
		t.Errorf("process %d did not end: killed", pid)
	}
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// markers are the values to look for, by name.
type markers map[string]string

// leak is a marker found where it must not be.
type leak struct {
	pid          int
	file, marker string
	arg0         string
}

// scanner scans /proc without pause until stopped.
type scanner struct {
	m    markers
	quit chan struct{}
	done chan struct{}
	once sync.Once

	mu    sync.Mutex
	leaks map[leak]bool
	scans int
}

func startScanner(m markers) *scanner {
	s := &scanner{m: m, quit: make(chan struct{}), done: make(chan struct{}), leaks: map[leak]bool{}}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.quit:
				return
			default:
			}
			s.scan()
		}
	}()
	return s
}

func (s *scanner) stop() {
	s.once.Do(func() { close(s.quit) })
	<-s.done
}

func (s *scanner) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scans
}

// check scans once more and fails the test for every leak found so far
// (once each).
func (s *scanner) check(t *testing.T, when string) {
	t.Helper()
	s.scan()
	s.mu.Lock()
	defer s.mu.Unlock()
	for l, reported := range s.leaks {
		if !reported {
			t.Errorf("%s: the %s value is in /proc/%d/%s of %q, not the container's command", when, l.marker, l.pid, l.file, l.arg0)
			s.leaks[l] = true
		}
	}
}

// scan reads the command line and environment of every process but the
// container's commands.
func (s *scanner) scan() {
	pids, _ := filepath.Glob("/proc/[0-9]*")
	var found []leak
	for _, dir := range pids {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		// First: a process's pid namespace never changes, so what it
		// holds after this read is still the same process's.
		status, err := os.ReadFile(dir + "/status")
		if err != nil || containerCommand(status) {
			continue
		}
		for _, file := range []string{"cmdline", "environ"} {
			data, err := os.ReadFile(dir + "/" + file)
			if err != nil {
				continue // gone, or (environ) not ours to read
			}
			for name, v := range s.m {
				if bytes.Contains(data, []byte(v)) {
					cmd, _ := os.ReadFile(dir + "/cmdline")
					arg0, _, _ := strings.Cut(string(cmd), "\x00")
					found = append(found, leak{pid: pid, file: file, marker: name, arg0: arg0})
				}
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scans++
	for _, l := range found {
		if _, ok := s.leaks[l]; !ok {
			s.leaks[l] = false
		}
	}
}

// containerCommand reports whether /proc/PID/status is that of a
// process in a pid namespace beneath ours which is not that namespace's
// init (tent's init, which the test scans): a command of the container.
func containerCommand(status []byte) bool {
	for line := range strings.SplitSeq(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			return len(f) > 1 && f[len(f)-1] != "1"
		}
	}
	return false
}
