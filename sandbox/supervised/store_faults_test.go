//go:build linux

package supervised

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/atomicfile"
	"github.com/tent-sandbox/tent/internal/atomicfile/atomicfiletest"
)

// A Save that fails for a full disk leaves the record as it was and no
// temporary beside it.
func TestSaveFullDiskKeepsOld(t *testing.T) {
	dir := atomicfiletest.SmallDisk(t, 256<<10, 0o700)
	s := stateDir{Dir: dir}
	const id = "aaaa000000000001"
	if err := s.Save(&record{recordHead: recordHead{ID: id}, Name: "box"}); err != nil {
		t.Fatal(err)
	}
	err := s.Save(&record{recordHead: recordHead{ID: id}, Name: "box", Labels: map[string]string{"big": strings.Repeat("x", 1<<20)}})
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("Save of a record larger than the disk: %v, want ENOSPC", err)
	}
	r, err := s.load(id)
	if err != nil || r.Name != "box" || len(r.Labels) != 0 {
		t.Errorf("the record after the failed Save: %+v, %v; want the old one", r, err)
	}
	if got := atomicfiletest.Names(t, dir); !slices.Equal(got, []string{id + ".json"}) {
		t.Errorf("the state directory holds %q, want the record alone (no temporary)", got)
	}
}

// The temporaries a Save killed while writing leaves are removed by the
// record's next Save and by Reclaim, those of older tents (decimal)
// too; a temporary a writer holds locked, and another sandbox's, stay.
func TestRecordTempsOfKilledSaves(t *testing.T) {
	const id, other = "aaaa000000000001", "bbbb000000000002"
	rec := &record{recordHead: recordHead{ID: id}, Name: "box"}
	s := saveRecords(t, rec, &record{recordHead: recordHead{ID: other}})
	d, err := s.openDir()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	live, err := atomicfile.CreateAt(dirFD(d), id+".json", 0o600, recordTemps(id))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Abort()
	dead := func(names ...string) {
		t.Helper()
		for _, n := range names {
			writeFile(t, filepath.Join(s.Dir, n), "{")
		}
	}
	hexTemp, oldTemp, othersTemp := recordTemps(id).TempName(), "."+id+".123.tmp", recordTemps(other).TempName()
	dead(hexTemp, oldTemp, othersTemp)
	want := func(what string, names ...string) {
		t.Helper()
		slices.Sort(names)
		if got := atomicfiletest.Names(t, s.Dir); !slices.Equal(got, names) {
			t.Errorf("after %s: %q, want %q", what, got, names)
		}
	}

	if err := s.Save(rec); err != nil {
		t.Fatal(err)
	}
	want("the next Save", id+".json", other+".json", live.TempName(), othersTemp)

	dead(hexTemp, oldTemp)
	s.Reclaim(rec)
	want("Reclaim", id+".json", other+".json", live.TempName(), othersTemp)

	for _, n := range []string{hexTemp, oldTemp, live.TempName()} {
		if got := leftoverID(n); got != id {
			t.Errorf("leftoverID(%q) = %q, want %s (the sweep's)", n, got, id)
		}
	}
	for _, n := range []string{"." + id + ".x1.tmp", "." + id + "..tmp", "." + id + ".1", fmt.Sprintf(".%s.%s.tmp", id, strings.Repeat("1", 33))} {
		if got := leftoverID(n); got != "" {
			t.Errorf("leftoverID(%q) = %q, want none (not a temporary of tent's)", n, got)
		}
	}
}
