//go:build linux

package supervised

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// saveRecords writes stopped records (no supervisor) into a fresh store.
func saveRecords(t *testing.T, recs ...*record) stateDir {
	t.Helper()
	s := stateDir{Dir: t.TempDir()}
	for i, r := range recs {
		r.State = sandbox.StateStopped
		r.Created = time.Date(2025, 1, 1, 0, 0, i, 0, time.UTC)
		if err := s.Save(r); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func TestGetNeverResolvesAnAmbiguousReference(t *testing.T) {
	s := saveRecords(t,
		&record{recordHead: recordHead{ID: "aaaa000000000001"}, Name: "box"},
		&record{recordHead: recordHead{ID: "aaaa000000000002"}, Name: "box"}, // an older tent let names repeat
		&record{recordHead: recordHead{ID: "bbbb000000000003"}, Name: "web"},
		&record{recordHead: recordHead{ID: "cccc000000000004"}, Name: "bbbb"},
	)
	for _, tc := range []struct {
		ref, id, err string
	}{
		{ref: "aaaa000000000002", id: "aaaa000000000002"}, // an exact id wins
		{ref: "web", id: "bbbb000000000003"},
		{ref: "aaaa0000000000", err: `ambiguous sandbox reference: "aaaa0000000000" matches 2 sandboxes: aaaa000000000001 (box), aaaa000000000002 (box); use a full id`},
		{ref: "box", err: `ambiguous sandbox reference: "box" matches 2 sandboxes: aaaa000000000001 (box), aaaa000000000002 (box); use a full id`},
		// "bbbb" is one sandbox's name and another's id prefix.
		{ref: "bbbb", err: `ambiguous sandbox reference: "bbbb" matches 2 sandboxes: bbbb000000000003 (web), cccc000000000004 (bbbb); use a full id`},
		{ref: "cccc", id: "cccc000000000004"},
		{ref: "dddd", err: `no such sandbox: "dddd" (see tent ls)`},
	} {
		r, err := s.Get(tc.ref)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("Get(%q) = %v, %v; want error %q", tc.ref, r, err, tc.err)
			}
			if strings.Contains(tc.err, "ambiguous") && !errors.Is(err, sandbox.ErrAmbiguous) {
				t.Errorf("Get(%q): %v is not sandbox.ErrAmbiguous", tc.ref, err)
			}
			continue
		}
		if err != nil || r.ID != tc.id {
			t.Errorf("Get(%q) = %v, %v; want %s", tc.ref, r, err, tc.id)
		}
	}
}

func TestNameInUse(t *testing.T) {
	s := saveRecords(t, &record{recordHead: recordHead{ID: "aaaa000000000001"}, Name: "box"}, &record{recordHead: recordHead{ID: "aaaa000000000002"}})
	r, err := s.NameInUse("box")
	if err != nil || r == nil || r.ID != "aaaa000000000001" {
		t.Fatalf("NameInUse(box) = %v, %v; want aaaa000000000001", r, err)
	}
	if r, err := s.NameInUse("other"); err != nil || r != nil {
		t.Fatalf("NameInUse(other) = %v, %v; want nil, nil", r, err)
	}
	unlock, err := s.LockNames()
	if err != nil {
		t.Fatal(err)
	}
	unlock()
}

// A record's head is what Get would say of its id, state and supervisor,
// reconciled the same way (a "running" record whose supervisor is gone
// reads as stopped), with the socket where Get puts it; Backend.Sandbox
// resolves an id through it and anything else from the whole records.
func TestHeadMatchesGet(t *testing.T) {
	s := saveRecords(t, &record{recordHead: recordHead{ID: "aaaa000000000001"}, Name: "box", Spec: sandbox.Spec{Limits: sandbox.Limits{Memory: 64 << 20}}})
	// A record that says running, with a supervisor that is not (pid 1's
	// start time is not 1).
	gone := &record{recordHead: recordHead{ID: "bbbb000000000002", State: sandbox.StateRunning, Supervisor: 1, SupervisorStart: 1}, Created: time.Now()}
	if err := s.Save(gone); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"aaaa000000000001", "bbbb000000000002"} {
		h, err := s.head(id)
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		if h.ID != r.ID || h.State != r.State || h.Supervisor != r.Supervisor || h.SupervisorStart != r.SupervisorStart || h.Socket != r.Socket {
			t.Errorf("head(%s) = %+v, Get = %+v", id, h, r)
		}
		if h.State != sandbox.StateStopped {
			t.Errorf("head(%s).State = %s, want stopped", id, h.State)
		}
	}
	if _, err := s.head("cccc000000000003"); err == nil {
		t.Error("head of a missing record succeeded")
	}
	b := &Backend{st: s}
	ctx := t.Context()
	for ref, want := range map[string]string{"aaaa000000000001": "aaaa000000000001", "box": "aaaa000000000001", "bbbb": "bbbb000000000002"} {
		sb, err := b.Sandbox(ctx, ref)
		if err != nil || sb.ID() != want {
			t.Errorf("Sandbox(%q) = %v, %v; want %s", ref, sb, err, want)
		}
	}
	if _, err := b.Sandbox(ctx, "cccc000000000003"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Sandbox of a missing id: %v, want ErrNotFound", err)
	}
	// A verb that only dials a stopped sandbox says so, as before.
	sb, err := b.Sandbox(ctx, "bbbb000000000002")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(ctx, sandbox.ExecRequest{Args: []string{"true"}}); !errors.Is(err, sandbox.ErrStopped) {
		t.Errorf("Exec in a stopped sandbox: %v, want ErrStopped", err)
	}
}
