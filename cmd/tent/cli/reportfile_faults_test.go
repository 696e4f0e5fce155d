//go:build linux

package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/atomicfile/atomicfiletest"
	"github.com/tent-sandbox/tent/sandbox"
)

// fillDisk writes a file in dir until the disk is full.
func fillDisk(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// --report FILE on a full disk leaves the old file whole, with its mode,
// and no temporary; the next report into the directory removes the
// temporaries a killed one left, and not one being written.
func TestReportFileFullDiskAndKill(t *testing.T) {
	rep := &sandbox.Report{CgroupVersion: "v2", CgroupPaths: []string{strings.Repeat("/sys/fs/cgroup/x", 100)}}

	dir := t.TempDir()
	dead := deadTemp(t, dir, reportTemps)
	live := holdTemp(t, dir, reportTemps)
	d, err := openReport(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.write(rep); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(atomicfiletest.Names(t, dir), " ")
	if strings.Contains(got, dead) || !strings.Contains(got, live) {
		t.Errorf("after the next report %s holds %q: want %s removed, the live %s kept", dir, got, dead, live)
	}
	if fi, err := os.Stat(filepath.Join(dir, "report.json")); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("the report: %v, %v; want mode 0644", fi, err)
	}

	full := atomicfiletest.SmallDisk(t, 64<<10, 0o777)
	p := filepath.Join(full, "report.json")
	old := strings.Repeat("old report\n", 100)
	writeOld(t, p, old)
	fillDisk(t, full)
	d, err = openReport(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.write(rep); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("a report onto a full disk: %v, want ENOSPC", err)
	}
	checkUntouched(t, "a report onto a full disk", p, old, "report.json", "filler")
}
