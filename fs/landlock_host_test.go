package fs

import (
	"slices"
	"testing"
)

// The reduced tier's rules, with the kernel's bits written out:
// execute 1, write_file 2, read_file 4, read_dir 8, truncate 1<<14,
// ioctl_dev 1<<15; every right of ABI 5 and later is 1<<16-1.
func TestHostLandlockRules(t *testing.T) {
	const (
		read     = 4 | 8
		readExec = 1 | 4 | 8
		device   = 2 | 4 | 1<<14 | 1<<15
		all      = 1<<16 - 1
	)
	got := HostLandlockRules([]Mount{
		{Source: "/srv/ro", Target: "/srv/ro", Access: ReadOnly},
		{Source: "/srv/rw", Access: ReadWrite},
		{Source: "/srv/cow", Target: "/elsewhere", Access: CopyOnWrite},
	})
	want := []LandlockRule{
		{"/proc", read},
		{"/usr", readExec}, {"/bin", readExec}, {"/sbin", readExec}, {"/lib", readExec},
		{"/lib32", readExec}, {"/lib64", readExec}, {"/libx32", readExec}, {"/etc", readExec}, {"/opt", readExec},
		{"/dev/null", device}, {"/dev/zero", device}, {"/dev/full", device},
		{"/dev/random", device}, {"/dev/urandom", device}, {"/dev/tty", device},
		{"/srv/ro", readExec},
		{"/srv/rw", all},
		{"/srv/cow", readExec},
	}
	if !slices.Equal(got, want) {
		t.Errorf("HostLandlockRules =\n%v\nwant\n%v", got, want)
	}
	if n := len(HostLandlockRules(nil)); n != len(want)-3 {
		t.Errorf("without mounts: %d rules, want %d", n, len(want)-3)
	}
	if slices.Contains(DefaultSystemPaths, "/opt") {
		t.Errorf("DefaultSystemPaths gained /opt: %q", DefaultSystemPaths)
	}
}
