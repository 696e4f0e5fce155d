package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

func TestServiceApplies(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		asJSON    bool
		want      sandbox.Service
	}{
		{"yaml start", "service:\n  start: exec nc -l -p 8080\n  env: {A: b}\n  workdir: /tmp\n  ready_port: 8080\n  ready_timeout: 5s\n", false,
			sandbox.Service{Command: []string{"/bin/sh", "-c", "exec nc -l -p 8080"}, Env: []string{"A=b"}, Workdir: "/tmp", ReadyPort: 8080, ReadyTimeout: 5 * time.Second}},
		{"json command", `{"service": {"command": ["srv", "-x"], "ready_command": "test -e /tmp/up"}}`, true,
			sandbox.Service{Command: []string{"srv", "-x"}, ReadyCommand: []string{"/bin/sh", "-c", "test -e /tmp/up"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.doc), tc.asJSON)
			if err != nil {
				t.Fatal(err)
			}
			var spec sandbox.Spec
			if err := p.Apply(&spec, nil); err != nil {
				t.Fatal(err)
			}
			got := spec.Service
			if got == nil || !slices.Equal(got.Command, tc.want.Command) || !slices.Equal(got.Env, tc.want.Env) || got.Workdir != tc.want.Workdir ||
				got.ReadyPort != tc.want.ReadyPort || !slices.Equal(got.ReadyCommand, tc.want.ReadyCommand) || got.ReadyTimeout != tc.want.ReadyTimeout {
				t.Fatalf("service = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// Bad service fields are refused with an error naming the field.
func TestServiceErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ doc, field string }{
		{"service: {ready_port: 80}", "service.command"},
		{"service: {start: '  '}", "service.command"},
		{"service: {command: ['']}", "service.command"},
		{"service: {start: x, command: [y]}", "service.start"},
		{"service: {start: x, ready_port: 65536}", "service.ready_port"},
		{"service: {start: x, ready_port: -1}", "service.ready_port"},
		{"service: {start: x, ready_timeout: -5s}", "service.ready_timeout"},
		{"service: {start: x, env: ['=v']}", "service.env[0]"},
		{"service: {start: x, workdir: rel}", "service.workdir"},
	} {
		p, err := Parse([]byte(tc.doc), false)
		if err != nil {
			t.Fatalf("%s: %v", tc.doc, err)
		}
		var spec sandbox.Spec
		err = p.Apply(&spec, nil)
		if !errors.Is(err, sandbox.ErrInvalidSpec) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want ErrInvalidSpec naming %s", tc.doc, err, tc.field)
		}
	}
	if _, err := Parse([]byte("service: {bogus: 1}"), false); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("unknown service key: %v", err)
	}
}
