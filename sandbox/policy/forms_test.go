package policy_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

func TestParseTier(t *testing.T) {
	for in, want := range map[string]sandbox.Tier{"": sandbox.TierAuto, "auto": sandbox.TierAuto, "full": sandbox.TierFull, "reduced": sandbox.TierReduced} {
		if got, err := policy.ParseTier(in); err != nil || got != want {
			t.Errorf("ParseTier(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"Full", "none", " full"} {
		got, err := policy.ParseTier(in)
		if want := "unknown tier " + `"` + in + `"` + ": want auto, full or reduced"; err == nil || err.Error() != want || got != "" {
			t.Errorf("ParseTier(%q) = %q, %v; want the error %q", in, got, err, want)
		}
	}
}

func TestParseMountResolvesAgainstCwd(t *testing.T) {
	m, err := policy.ParseMount("src:/work", sandbox.ReadWrite, "/home/me")
	if want := (sandbox.Mount{Source: "/home/me/src", Target: "/work", Access: sandbox.ReadWrite}); err != nil || m != want {
		t.Errorf("ParseMount = %+v, %v; want %+v", m, err, want)
	}
	if _, err := policy.ParseMount("/a:", sandbox.ReadOnly, "/"); !errors.Is(err, fs.ErrInvalidMount) {
		t.Errorf("ParseMount(\"/a:\") = %v; want fs.ErrInvalidMount", err)
	}
}

func TestLoadSeccomp(t *testing.T) {
	for in, want := range map[string]sandbox.Seccomp{"default": {}, "unconfined": {Unconfined: true}} {
		if got, err := policy.LoadSeccomp(in, "/nonexistent"); err != nil || got != want {
			t.Errorf("LoadSeccomp(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	if _, err := policy.LoadSeccomp("", "/"); err == nil || !strings.HasPrefix(err.Error(), "empty value: want default, unconfined") {
		t.Errorf("LoadSeccomp(\"\") = %v; want the empty-value error", err)
	}
	dir := t.TempDir()
	profile, err := os.ReadFile("../../seccomp/testdata/docker-default.json")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "default"), string(profile))
	got, err := policy.LoadSeccomp("./default", dir)
	if err != nil || got.Profile == nil || got.Unconfined {
		t.Errorf("LoadSeccomp(./default) = %+v, %v; want the profile read relative to dir", got, err)
	}
	if _, err := policy.LoadSeccomp("missing.json", dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadSeccomp(missing.json) = %v; want os.ErrNotExist", err)
	}
}
