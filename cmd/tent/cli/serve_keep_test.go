package cli

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/internal/e2bsdk"
)

// TestServeRestartKeepsBackgroundCommands: through E2B's SDK, a background
// command started before `tent serve --keep-sandboxes` stops goes on, and
// after a new server starts, commands.list lists it and commands.connect
// gets the rest of its output and its exit code.
func TestServeRestartKeepsBackgroundCommands(t *testing.T) {
	node, modules, err := e2bsdk.Install(t.TempDir())
	if errors.Is(err, e2bsdk.ErrNoNode) { // not with $TENT_REQUIRE_SDK (CI): an error then
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	t.Cleanup(func() { tent(t, "--state-dir", state, "rm", "--all") })
	env, stop := startSDKServe(t, state, "--keep-sandboxes")
	out, err := runSDKScript(t, node, modules, `import { Sandbox } from 'e2b'
const s = await Sandbox.create({ timeoutMs: 120_000 })
const h = await s.commands.run('echo first; until [ -e /tmp/go ]; do sleep 0.05; done; echo second; exit 3', { background: true })
for (let i = 0; i < 400 && !h.stdout.includes('first'); i++) await new Promise((r) => setTimeout(r, 25))
console.log(JSON.stringify({ id: s.sandboxId, pid: h.pid, stdout: h.stdout }))
process.exit(0)
`, env...)
	if err != nil {
		t.Fatalf("before the restart: %v\n%s", err, out)
	}
	var started struct {
		ID     string
		Pid    int
		Stdout string
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if json.Unmarshal([]byte(lines[len(lines)-1]), &started) != nil || started.Stdout != "first\n" || started.Pid <= 0 {
		t.Fatalf("before the restart: %s", out)
	}
	stop()

	env, _ = startSDKServe(t, state, "--keep-sandboxes")
	out, err = runSDKScript(t, node, modules, `import { Sandbox } from 'e2b'
const s = await Sandbox.connect(process.env.ID)
const pid = Number(process.env.PID)
const listed = (await s.commands.list()).some((p) => p.pid === pid)
const h = await s.commands.connect(pid)
await s.files.write('/tmp/go', '')
try {
  await h.wait()
  console.log('no error')
} catch (e) {
  console.log(JSON.stringify({ listed, exit: e.exitCode, stdout: h.stdout }))
}
await s.kill()
`, append(env, "ID="+started.ID, "PID="+strconv.Itoa(started.Pid))...)
	if err != nil {
		t.Fatalf("after the restart: %v\n%s", err, out)
	}
	lines = strings.Split(strings.TrimSpace(string(out)), "\n")
	if got := lines[len(lines)-1]; got != `{"listed":true,"exit":3,"stdout":"second\n"}` {
		t.Errorf("after the restart: %s\nwant the command listed, its exit 3 and only what was not read before", out)
	}
}
