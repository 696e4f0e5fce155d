package supervised

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// killedWriterEnv names the state directory, sandbox and path the
// writer process of TestFileWriteClientKilledKeepsOld writes to.
const killedWriterEnv = "TENT_TEST_KILLED_WRITER"

// stallingReader yields n bytes, then blocks for ever.
type stallingReader struct{ n int }

func (r *stallingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		select {}
	}
	p = p[:min(len(p), r.n)]
	for i := range p {
		p[i] = 'x'
	}
	r.n -= len(p)
	return len(p), nil
}

// TestKilledWriterProcess is the writer process of
// TestFileWriteClientKilledKeepsOld (it does nothing in a plain run): a
// library caller writing a file of a supervised sandbox from a reader
// that yields 1 MiB and then stalls, until it is killed.
func TestKilledWriterProcess(t *testing.T) {
	v := os.Getenv(killedWriterEnv)
	if v == "" {
		t.Skip("the writer process of TestFileWriteClientKilledKeepsOld")
	}
	dir, rest, _ := strings.Cut(v, "\n")
	id, path, _ := strings.Cut(rest, "\n")
	b, err := Open(dir, Options{IdleAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.Sandbox(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.WriteFile(context.Background(), path, &stallingReader{n: 1 << 20}, sandbox.WriteOptions{})
	t.Fatalf("the write returned (%v); it was to stall until killed", err)
}

// A library caller killed mid-write (SIGKILL, its reader stalled after
// 1 MiB) leaves the file it was replacing as it was, content and mode,
// and no temporary (issue 36: the helper saw the end of its input, and
// put the first MiB in place of the file).
func TestFileWriteClientKilledKeepsOld(t *testing.T) {
	dir := t.TempDir()
	b, err := Open(dir, Options{IdleAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		all, _ := b.List(context.Background())
		for _, i := range all {
			_ = sbOf(t, b, i.ID).Terminate(context.Background())
		}
	})
	id := provision(t, b, sandbox.Spec{}).ID
	sh := func(script string) string {
		t.Helper()
		out, res := execOut(t, b, id, "sh", "-c", script)
		if res.ExitCode != 0 {
			t.Fatalf("%q: %+v", script, res)
		}
		return strings.TrimSpace(out)
	}
	sh("mkdir /tmp/k && printf 'old content' > /tmp/k/f && chmod 640 /tmp/k/f")

	cmd := exec.Command("/proc/self/exe", "-test.run=^TestKilledWriterProcess$")
	cmd.Env = append(os.Environ(), killedWriterEnv+"="+dir+"\n"+id+"\n/tmp/k/f")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	// Until the helper has written the MiB into its temporary (the
	// writer's reader then stalls; a bound on the wait only against a
	// test that hangs).
	until := func(what, script string) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if sh(script) == "yes" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("waited 2 minutes for %s: /tmp/k holds %s", what, sh("ls -la /tmp/k"))
			}
		}
	}
	until("the helper to write 1 MiB", fmt.Sprintf(`for f in /tmp/k/.tent-*; do [ -f "$f" ] && [ "$(stat -c %%s "$f")" -ge %d ] && echo yes && exit; done; echo no`, 1<<20))
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed = true
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("the writer: %v; want it killed", err)
	}
	// The helper ends once its input does: its temporary goes.
	until("the helper to end", `for f in /tmp/k/.tent-*; do [ -e "$f" ] && echo no && exit; done; echo yes`)
	if got := sh("cat /tmp/k/f; stat -c ' %a' /tmp/k/f"); got != "old content 640" {
		t.Errorf("after the writer was killed, /tmp/k/f holds %.40q (%d bytes); want the old content, mode 640", got, len(got))
	}
	if got := sh("ls -A /tmp/k"); got != "f" {
		t.Errorf("/tmp/k holds %q; want f alone", got)
	}
}
