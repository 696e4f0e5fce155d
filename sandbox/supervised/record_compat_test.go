//go:build linux

package supervised

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

// A state record written by an older tent, whose spec is the flat JSON
// of a Spec before it was grouped (testdata/record-flat.json was saved
// by tent at c256ceb, every field of its spec set), still reads: its
// spec is the grouped Spec of that JSON, and it saves and reads back
// unchanged.
func TestRecordWithAFlatSpecReads(t *testing.T) {
	old, err := os.ReadFile("testdata/record-flat.json")
	if err != nil {
		t.Fatal(err)
	}
	flat, err := os.ReadFile("../testdata/spec-flat.json")
	if err != nil {
		t.Fatal(err)
	}
	var want sandbox.Spec
	if err := json.Unmarshal(flat, &want); err != nil {
		t.Fatal(err)
	}
	s := stateDir{Dir: t.TempDir()}
	const id = "0123456789abcdef"
	if err := os.WriteFile(s.path(id), old, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := s.load(id)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Spec, want) {
		t.Errorf("the record's spec reads\n%+v\nwant\n%+v", r.Spec, want)
	}
	fs, idn, nw := r.Spec.Filesystem, r.Spec.Identity, r.Spec.Networking
	if len(fs.Mounts) != 2 || fs.Mounts[0].Target != "/work" || fs.Root == nil || !fs.GitWritable ||
		idn.User == nil || idn.User.Name != "agent" || idn.Hostname != "box" || !idn.Sudo ||
		nw.Network.Mode != "limited" || len(nw.Ports) != 1 || nw.Ports[0].Port != 3000 ||
		r.Spec.Limits.Pids != 256 || !r.Spec.Seccomp.Unconfined || r.Spec.Tier != sandbox.TierReduced || !r.Spec.BestEffort {
		t.Errorf("the record's spec lost fields: %+v", r.Spec)
	}
	if err := s.Save(r); err != nil {
		t.Fatal(err)
	}
	again, err := s.load(id)
	if err != nil || !reflect.DeepEqual(again.Spec, r.Spec) {
		t.Errorf("saved and read back: %+v, %v; want %+v", again, err, r.Spec)
	}
}
