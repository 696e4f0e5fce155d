package policy_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

func TestLoadTemplate(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "small.yaml"), "memory: 64M\nhostname: small\n")
	writeFile(t, filepath.Join(dir, "both.json"), `{"hostname": "json"}`)
	writeFile(t, filepath.Join(dir, "both.yaml"), "hostname: yaml\n")
	writeFile(t, filepath.Join(dir, "alt.yml"), "pids: 7\n")
	writeFile(t, filepath.Join(dir, "broken.yaml"), "bogus_key: 1\n")
	// Outside the templates directory: no name may reach it.
	writeFile(t, filepath.Join(filepath.Dir(dir), "x.yaml"), "hostname: outside\n")

	for _, tc := range []struct {
		name  string
		found bool
		check func(sandbox.Spec) bool
	}{
		{"small", true, func(s sandbox.Spec) bool { return s.Hostname == "small" && s.Limits.Memory == 64<<20 }},
		{"both", true, func(s sandbox.Spec) bool { return s.Hostname == "json" }}, // .json first
		{"alt", true, func(s sandbox.Spec) bool { return s.Limits.Pids == 7 }},
		{"missing", false, func(s sandbox.Spec) bool { return reflect.ValueOf(s).IsZero() }},
	} {
		spec, found, err := policy.LoadTemplate(dir, "templateID", tc.name)
		if err != nil || found != tc.found || !tc.check(spec) {
			t.Errorf("LoadTemplate(%q) = %+v, %v, %v", tc.name, spec, found, err)
		}
	}
	if spec, found, err := policy.LoadTemplate("", "templateID", "small"); err != nil || found || !reflect.ValueOf(spec).IsZero() {
		t.Errorf("no directory: %+v, %v, %v; want not found", spec, found, err)
	}

	_, found, err := policy.LoadTemplate(dir, "templateID", "broken")
	var perr *policy.Error
	if found || !errors.As(err, &perr) || !strings.Contains(err.Error(), "bogus_key") || errors.Is(err, policy.ErrTemplateName) {
		t.Errorf("broken template: found %v, err %v; want the policy's error", found, err)
	}

	for _, name := range []string{"../x", "a/b", "/etc/passwd", "..", ".hidden", "", "x\x00", strings.Repeat("a", 129)} {
		spec, found, err := policy.LoadTemplate(dir, "templateID", name)
		want := `templateID ` + strconv.Quote(name) + `: a template name is 1 to 128 letters, digits, '.', '_' or '-'`
		if found || !errors.Is(err, policy.ErrTemplateName) || err.Error() != want || !reflect.ValueOf(spec).IsZero() {
			t.Errorf("LoadTemplate(%q) = %v, %v; want %q", name, found, err, want)
		}
	}
}

func TestTemplateNames(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"b.yaml", "a.json", "c.yml", "notes.txt", ".hidden.yaml", "-opt.json"} {
		writeFile(t, filepath.Join(dir, n), "")
	}
	if err := os.Mkdir(filepath.Join(dir, "d.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.json", filepath.Join(dir, "link.json")); err != nil {
		t.Fatal(err)
	}
	names, err := policy.TemplateNames(dir)
	if want := []string{"a", "b", "c"}; err != nil || !reflect.DeepEqual(names, want) {
		t.Errorf("TemplateNames = %q, %v; want %q", names, err, want)
	}
	if _, err := policy.TemplateNames(filepath.Join(dir, "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing directory: %v", err)
	}
}
