//go:build linux

package supervised

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/sandbox"
)

// brokenKinds are the ways a record can be unreadable, each made in the
// state directory dir for sandbox id by make, with the error it reads
// as. outside is a directory beside the state directory.
var brokenKinds = []struct {
	name string
	make func(t *testing.T, dir, id, outside string)
	err  string
}{
	{"truncated", func(t *testing.T, dir, id, _ string) {
		writeFile(t, filepath.Join(dir, id+".json"), `{"id": "`+id+`", "state": "stopped", "spec": {"na`)
	}, "unexpected end of JSON input"},
	{"empty", func(t *testing.T, dir, id, _ string) { writeFile(t, filepath.Join(dir, id+".json"), "") }, "unexpected end of JSON input"},
	{"garbage", func(t *testing.T, dir, id, _ string) {
		writeFile(t, filepath.Join(dir, id+".json"), "\x00\x01garbage")
	}, "invalid character '\\x00' looking for beginning of value"},
	{"symlink", func(t *testing.T, dir, id, outside string) {
		// To a record that would read well: it is never followed.
		target := filepath.Join(outside, "target.json")
		writeFile(t, target, `{"id": "`+id+`", "state": "stopped"}`)
		if err := os.Symlink(target, filepath.Join(dir, id+".json")); err != nil {
			t.Fatal(err)
		}
	}, "it is a symlink (never followed)"},
	{"directory", func(t *testing.T, dir, id, _ string) {
		if err := os.MkdirAll(filepath.Join(dir, id+".json", "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, id+".json", "sub", "f"), "x")
	}, "it is a directory"},
	{"fifo", func(t *testing.T, dir, id, _ string) {
		if err := unix.Mkfifo(filepath.Join(dir, id+".json"), 0o600); err != nil {
			t.Fatal(err)
		}
	}, "it is not a regular file (p---------)"},
	{"another id", func(t *testing.T, dir, id, _ string) {
		writeFile(t, filepath.Join(dir, id+".json"), `{"id": "ffff000000000000", "state": "stopped"}`)
	}, `it names sandbox "ffff000000000000"`},
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// One unreadable record stops nothing: the others are listed and found
// (by id, name, prefix), the broken one is reported as a *RecordError
// (its id, file and error) by List, Get and Lookup, and Terminate of its
// handle removes it and its files (never what a symlink points to).
func TestBrokenRecordStopsNothing(t *testing.T) {
	for _, kind := range brokenKinds {
		t.Run(kind.name, func(t *testing.T) {
			s := saveRecords(t,
				&record{recordHead: recordHead{ID: "aaaa000000000001"}, Name: "box"},
				&record{recordHead: recordHead{ID: "bbbb000000000002"}, Name: "web"})
			const id = "cccc000000000003"
			outside := t.TempDir()
			kind.make(t, s.Dir, id, outside)
			// What a supervisor killed while it wrote leaves beside it.
			writeFile(t, filepath.Join(s.Dir, id+".log"), "log")
			writeFile(t, filepath.Join(s.Dir, "."+id+".123.tmp"), "{")
			want := "sandbox " + id + ": broken state record " + filepath.Join(s.Dir, id+".json") + ": " + kind.err + " (tent rm " + id + " removes it)"

			recs, broken, err := s.List()
			if err != nil || len(recs) != 2 || recs[0].ID != "aaaa000000000001" || recs[1].ID != "bbbb000000000002" {
				t.Fatalf("List = %v, %v, %v; want the two readable records", recs, broken, err)
			}
			if len(broken) != 1 || broken[0].ID != id || broken[0].Path != filepath.Join(s.Dir, id+".json") || broken[0].Error() != want {
				t.Fatalf("List's broken records: %v, want one: %s", broken, want)
			}
			for ref, wantID := range map[string]string{"box": "aaaa000000000001", "web": "bbbb000000000002", "aaaa": "aaaa000000000001", "bbbb000000000002": "bbbb000000000002"} {
				if r, err := s.Get(ref); err != nil || r.ID != wantID {
					t.Errorf("Get(%q) = %v, %v; want %s", ref, r, err, wantID)
				}
			}
			if r, err := s.NameInUse("web"); err != nil || r == nil || r.ID != "bbbb000000000002" {
				t.Errorf("NameInUse(web) = %v, %v", r, err)
			}
			for _, ref := range []string{id, "cccc"} {
				var re *RecordError
				if _, err := s.Get(ref); !errors.As(err, &re) || re.ID != id || err.Error() != want {
					t.Errorf("Get(%q): %v, want the *RecordError %s", ref, err, want)
				}
			}
			if _, err := s.head(id); !errors.As(err, new(*RecordError)) {
				t.Errorf("head of the broken record: %v, want a *RecordError", err)
			}

			b := &Backend{st: s, log: slog.New(slog.DiscardHandler)}
			ctx := context.Background()
			infos, brokenInfos, err := b.ListAll(ctx)
			if err != nil || len(infos) != 2 || len(brokenInfos) != 1 || brokenInfos[0].ID != id {
				t.Errorf("ListAll = %v, %v, %v", infos, brokenInfos, err)
			}
			if infos, err := b.List(ctx); err != nil || len(infos) != 2 {
				t.Errorf("List = %v, %v; want the two readable sandboxes", infos, err)
			}
			if _, _, err := b.Lookup(ctx, id); !errors.As(err, new(*RecordError)) {
				t.Errorf("Lookup of the broken record: %v, want a *RecordError", err)
			}
			sb, err := b.Sandbox(ctx, id)
			if err != nil {
				t.Fatalf("Sandbox of the broken record's id: %v", err)
			}
			if _, err := sb.Info(ctx); !errors.As(err, new(*RecordError)) {
				t.Errorf("Info of the broken record: %v, want a *RecordError", err)
			}
			if _, err := sb.Exec(ctx, sandbox.ExecRequest{Args: []string{"true"}}); !errors.As(err, new(*RecordError)) {
				t.Errorf("Exec in the broken record's sandbox: %v, want a *RecordError", err)
			}
			if err := sb.Terminate(ctx); err != nil {
				t.Fatalf("Terminate of the broken record: %v", err)
			}
			ents, _ := os.ReadDir(s.Dir)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if strings.Join(names, " ") != "aaaa000000000001.json bbbb000000000002.json" {
				t.Errorf("the state directory after Terminate: %v, want the two readable records", names)
			}
			if ents, _ := os.ReadDir(outside); kind.name == "symlink" && len(ents) != 1 {
				t.Errorf("the symlink's target was removed: %v", ents)
			}
			if _, err := b.Sandbox(ctx, id); !errors.Is(err, sandbox.ErrNotFound) {
				t.Errorf("Sandbox after Terminate: %v, want ErrNotFound", err)
			}
		})
	}
}

// A prefix that matches a readable record and a broken one is
// ambiguous, naming both.
func TestBrokenRecordPrefixIsAmbiguous(t *testing.T) {
	s := saveRecords(t, &record{recordHead: recordHead{ID: "aaaa000000000001"}, Name: "box"})
	writeFile(t, filepath.Join(s.Dir, "aaaa000000000002.json"), "")
	_, err := s.Get("aaaa")
	want := `ambiguous sandbox reference: "aaaa" matches 2 sandboxes: aaaa000000000001 (box), aaaa000000000002 (broken record); use a full id`
	if !errors.Is(err, sandbox.ErrAmbiguous) || err.Error() != want {
		t.Errorf("Get(aaaa): %v, want %s", err, want)
	}
}

// Save writes beneath the state directory: the record whole, 0600, no
// temporary left, and never through a symlink planted as a temporary's
// or the record's name (the rename replaces the link itself).
func TestSaveIsAtomicAndLeavesNothing(t *testing.T) {
	s := stateDir{Dir: t.TempDir()}
	outside := filepath.Join(t.TempDir(), "victim")
	writeFile(t, outside, "keep")
	const id = "aaaa000000000001"
	if err := os.Symlink(outside, s.path(id)); err != nil {
		t.Fatal(err)
	}
	r := &record{recordHead: recordHead{ID: id, State: sandbox.StateStopped}, Name: "box", Created: time.Now().UTC()}
	if err := s.Save(r); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(s.Dir)
	if len(ents) != 1 || ents[0].Name() != id+".json" {
		t.Fatalf("after Save: %v, want the record alone", ents)
	}
	fi, err := os.Lstat(s.path(id))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the record: %v, %v; want a regular file 0600", fi, err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "keep" {
		t.Errorf("Save wrote through a symlink: %q", b)
	}
	got, err := s.load(id)
	if err != nil || got.Name != "box" {
		t.Errorf("load after Save: %v, %v", got, err)
	}
	if err := s.Save(&record{recordHead: recordHead{ID: "../x"}}); err == nil {
		t.Error("Save of a record whose id is not one succeeded")
	}
}

// What a create or fork killed before its sandbox was saved leaves (its
// log, perhaps its socket, a record's temporary) is swept; a create in
// progress (its log locked by its creator, then its supervisor) and a
// sandbox with a record are never touched.
func TestSweepRemovesWhatKilledCreatesLeft(t *testing.T) {
	s := saveRecords(t, &record{recordHead: recordHead{ID: "aaaa000000000001"}})
	dir := s.Dir
	// Sandbox aaaa has a record: its files stay, whatever they are.
	writeFile(t, filepath.Join(dir, "aaaa000000000001.log"), "")
	// bbbb: a create killed early (a 0-byte log, a record's temporaries,
	// an older tent's and this one's).
	writeFile(t, filepath.Join(dir, "bbbb000000000002.log"), "")
	writeFile(t, filepath.Join(dir, ".bbbb000000000002.77.tmp"), "{")
	writeFile(t, filepath.Join(dir, recordTemps("bbbb000000000002").TempName()), "{")
	// cccc: a create in progress: its creator holds its log's lock.
	live, err := openLog(s, "cccc000000000003")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	// dddd: a socket nobody listens on, no log.
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: filepath.Join(dir, "dddd000000000004.sock"), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	// eeee: a socket a process listens on, no log: left alone.
	l2, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: filepath.Join(dir, "eeee000000000005.sock"), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	// Not a sandbox's: left alone.
	writeFile(t, filepath.Join(dir, "notes.log"), "")

	if err := s.sweep(); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	want := "aaaa000000000001.json aaaa000000000001.log cccc000000000003.log eeee000000000005.sock notes.log"
	if strings.Join(names, " ") != want {
		t.Errorf("after the sweep: %v, want %s", names, want)
	}
	// The creator's log is its own still: writes land in the file there.
	if _, err := live.WriteString("provisioning\n"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "cccc000000000003.log")); string(b) != "provisioning\n" {
		t.Errorf("the live create's log: %q", b)
	}
	// Once its creator is gone (no supervisor took it over), it goes.
	live.Close()
	if err := s.sweep(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cccc000000000003.log")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead create's log after a sweep: %v", err)
	}
}

// A creator opening its log while a sweep holds it gets a file that is
// there (not the one the sweep removes); a second creator of one id (two
// resumes of one stopped sandbox) is refused while the first holds it.
func TestOpenLogLock(t *testing.T) {
	s := stateDir{Dir: t.TempDir()}
	const id = "aaaa000000000001"
	path := filepath.Join(s.Dir, id+".log")
	writeFile(t, path, "")
	sweeping, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(sweeping.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	got := make(chan *os.File, 1)
	go func() {
		f, err := openLog(s, id)
		if err != nil {
			t.Error(err)
		}
		got <- f
	}()
	// The sweep removes the file, then lets go of its lock.
	time.Sleep(20 * time.Millisecond) // (any interleaving is correct)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	sweeping.Close()
	f := <-got
	if f == nil {
		return
	}
	defer f.Close()
	if !sameFile(f, path) {
		t.Fatal("openLog returned a file that is no longer the log")
	}
	old := logLockWait
	logLockWait = 10 * time.Millisecond
	defer func() { logLockWait = old }()
	if _, err := openLog(s, id); err == nil || !strings.Contains(err.Error(), "is held by another process") {
		t.Errorf("a second openLog of a held log: %v", err)
	}
}

// A sandbox whose supervisor is gone says why: the host restarted (its
// supervisor started before this boot), or it died (killed, crashed).
func TestSupervisorGoneReason(t *testing.T) {
	booted := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	r := &record{recordHead: recordHead{Supervisor: 42}, Created: booted.Add(-time.Hour)}
	if got, want := supervisorGoneReason(r, booted), "the host restarted: its supervisor (pid 42) is gone"; got != want {
		t.Errorf("before the boot: %q, want %q", got, want)
	}
	r.Created = booted.Add(time.Hour)
	if got, want := supervisorGoneReason(r, booted), "its supervisor (pid 42) died: killed or crashed"; got != want {
		t.Errorf("after the boot: %q, want %q", got, want)
	}
	// As every reader sees it.
	s := stateDir{Dir: t.TempDir()}
	gone := &record{recordHead: recordHead{ID: "bbbb000000000002", State: sandbox.StateRunning, Supervisor: 1, SupervisorStart: 1}, Created: time.Now()}
	if err := s.Save(gone); err != nil {
		t.Fatal(err)
	}
	want := "its supervisor (pid 1) died: killed or crashed"
	if r, err := s.Get(gone.ID); err != nil || r.State != sandbox.StateStopped || r.Reason != want {
		t.Errorf("Get: %+v, %v; want stopped, %q", r, err, want)
	}
	if recs, _, err := s.List(); err != nil || len(recs) != 1 || recs[0].Reason != want {
		t.Errorf("List: %+v, %v", recs, err)
	}
}

// A running command has no exit status in JSON; an exited one has one,
// 0 included.
func TestProcessInfoJSON(t *testing.T) {
	for _, tc := range []struct {
		p    ProcessInfo
		exit any
	}{
		{ProcessInfo{Pid: 2, Running: true}, nil},
		{ProcessInfo{Pid: 2, Exit: 0}, float64(0)},
		{ProcessInfo{Pid: 2, Exit: 3}, float64(3)},
	} {
		b, err := json.Marshal(tc.p)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if exit, ok := m["exit"]; exit != tc.exit || ok != (tc.exit != nil) || m["pid"] != float64(2) {
			t.Errorf("%+v as JSON: %s", tc.p, b)
		}
		var back ProcessInfo
		if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, tc.p) {
			t.Errorf("%s read back: %+v, %v", b, back, err)
		}
	}
}

// A supervisor that idled while its record was damaged, woken, writes
// its record again from what it knows (it ended its sandbox before: a
// proxied connection from inside was enough to lose it).
func TestIdleSupervisorRewritesItsBrokenRecord(t *testing.T) {
	b := openIdling(t)
	ctx := context.Background()
	t.Cleanup(func() {
		all, _, _ := b.ListAll(ctx)
		for _, i := range all {
			_ = sbOf(t, b, i.ID).Terminate(ctx)
		}
	})
	info := provision(t, b, sandbox.Spec{Name: "heal", Labels: map[string]string{"k": "v"}})
	rec, err := b.st.load(info.ID)
	if err != nil {
		t.Fatal(err)
	}
	sup := rec.Supervisor
	waitSupervisorIdle(t, sup)
	if err := os.WriteFile(b.st.path(info.ID), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// Woken by a connection (as by a proxied one from inside).
	conn, err := net.Dial("unixpacket", b.st.SocketPath(info.ID))
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	var got *record
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if got, err = b.st.load(info.ID); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("the record after the wake-up: %v", err)
	}
	if got.Name != "heal" || got.Labels["k"] != "v" || got.State != sandbox.StateRunning || got.Supervisor != sup || got.Created.IsZero() ||
		len(got.Cgroups) != len(rec.Cgroups) || got.Spec.Name != "heal" {
		t.Errorf("the record written again: %+v, want it as it was: %+v", got, rec)
	}
	if out, _ := execOut(t, b, "heal", "echo", "alive"); out != "alive\n" {
		t.Errorf("exec after the wake-up: %q", out)
	}
}
