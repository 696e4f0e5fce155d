package policy_test

import (
	"path"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

func TestParseDuration(t *testing.T) {
	good := map[string]time.Duration{"0": 0, "0s": 0, "500ms": 500 * time.Millisecond, "2s": 2 * time.Second, "1m30s": 90 * time.Second, "1h": time.Hour}
	for in, want := range good {
		if got, err := policy.ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for in, want := range map[string]string{"": "not a duration", "2": "not a duration", "abc": "not a duration", "-1s": "negative", "-0.5ms": "negative"} {
		if d, err := policy.ParseDuration(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseDuration(%q) = %v, %v; want an error containing %q", in, d, err, want)
		}
	}
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"0", "500ms", "2s", "1m30s", "-1s", "1.5h", "2562047h47m16.854775807s", "", "1x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := policy.ParseDuration(s)
		if err != nil {
			return
		}
		if d < 0 {
			t.Fatalf("ParseDuration(%q) = %v < 0", s, d)
		}
		if std, err := time.ParseDuration(s); err != nil || std != d {
			t.Fatalf("ParseDuration(%q) = %v, time.ParseDuration = %v, %v", s, d, std, err)
		}
		if again, err := policy.ParseDuration(d.String()); err != nil || again != d {
			t.Fatalf("ParseDuration(%q) = %v, but ParseDuration(%q) = %v, %v", s, d, d.String(), again, err)
		}
	})
}

func TestParseUser(t *testing.T) {
	good := map[string]sandbox.User{"0": {UID: 0, GID: 0}, "1000": {UID: 1000, GID: 1000}, "1000:100": {UID: 1000, GID: 100}, "0:0": {UID: 0, GID: 0}, "4294967294:4294967294": {UID: 4294967294, GID: 4294967294}}
	for in, want := range good {
		if got, err := policy.ParseUser(in); err != nil || !reflect.DeepEqual(*got, want) {
			t.Errorf("ParseUser(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	bad := map[string]string{
		"": "uid: empty", ":1": "uid: empty", "1:": "gid: empty", "root": "uid: not a number",
		"-1": "uid: not a number", "+1": "uid: not a number", "1:x": "gid: not a number",
		"4294967295": "uid: out of range", "1:4294967295": "gid: out of range", "99999999999": "uid: out of range",
		"1:2:3": "gid: not a number",
	}
	for in, want := range bad {
		if u, err := policy.ParseUser(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseUser(%q) = %v, %v; want an error containing %q", in, u, err, want)
		}
	}
}

func TestParseEnv(t *testing.T) {
	for _, in := range []string{"A=1", "_x=", "PATH=/a:/b", "K==v=", "a1_B=x y"} {
		if got, err := policy.ParseEnv(in); err != nil || got != in {
			t.Errorf("ParseEnv(%q) = %q, %v", in, got, err)
		}
	}
	for in, want := range map[string]string{"A": "not KEY=VALUE", "=1": `invalid variable name ""`, "1A=1": "invalid variable name", "A-B=1": "invalid variable name", "A B=1": "invalid variable name"} {
		if _, err := policy.ParseEnv(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseEnv(%q) = %v; want an error containing %q", in, err, want)
		}
	}
}

func TestParseEnvFile(t *testing.T) {
	in := "# comment\n\n  A=1\r\nexport B = two words \nC=\"quoted # not a comment\"\nD='single'\nE=\"unbalanced'\nF=x=y\nG=\nH=v # kept\n\t# indented comment\nI=\"\"\n"
	got, err := policy.ParseEnvFile(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"A=1", "B=two words", "C=quoted # not a comment", "D=single", "E=\"unbalanced'", "F=x=y", "G=", "H=v # kept", "I="}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("ParseEnvFile = %q\nwant %q", got, want)
	}
	for in, want := range map[string]string{
		"A=1\nNOEQUALS\n":          `line 2: "NOEQUALS" is not KEY=VALUE`,
		"\n\n1A=x\n":               `line 3: invalid variable name "1A"`,
		"A-B=1":                    `line 1: invalid variable name "A-B"`,
		"export =1":                `line 1: invalid variable name ""`,
		strings.Repeat("x", 2<<20): "line 1: longer than 1 MiB",
	} {
		if _, err := policy.ParseEnvFile(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseEnvFile(%.20q) = %v; want an error containing %q", in, err, want)
		}
	}
}

// FuzzValidateTarget checks the properties DESIGN.md demands of accepted
// mount targets.
func FuzzValidateTarget(f *testing.F) {
	for _, s := range []string{"/work", "/", "/proc", "/proc/x", "/dev", "/sys/fs", "/procx", "work", "/a/../b", "/a/..", "/a//b", "/a/", "/a/./b", "/..", "/a\x00b", "", "/devices"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		if fs.ValidateTarget(target) != nil {
			return
		}
		switch {
		case !path.IsAbs(target):
			t.Fatalf("accepted relative target %q", target)
		case path.Clean(target) != target:
			t.Fatalf("accepted unclean target %q", target)
		case strings.ContainsRune(target, 0):
			t.Fatalf("accepted target %q with a NUL byte", target)
		case target == "/":
			t.Fatalf("accepted the root as a target")
		}
		for _, elem := range strings.Split(target, "/") {
			if elem == ".." {
				t.Fatalf("accepted target %q with ..", target)
			}
		}
		for _, r := range []string{"/proc", "/dev", "/sys"} {
			if target == r || strings.HasPrefix(target, r+"/") {
				t.Fatalf("accepted reserved target %q", target)
			}
		}
	})
}
