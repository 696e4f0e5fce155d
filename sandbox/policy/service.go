package policy

import (
	"errors"
	"strconv"
	"strings"

	"github.com/tent-sandbox/tent/sandbox"
)

// Service is a policy's service: the command the sandbox runs for as
// long as it lives and its readiness check (see sandbox.Service), as an
// E2B template's start and ready commands:
//
//	service:
//	  start: "python3 -m http.server 8000"  # a shell line (/bin/sh -c), or
//	  command: [python3, -m, http.server]   # an argv; one of the two
//	  env: {PORT: "8000"}                   # or ["PORT=8000"]
//	  workdir: /work
//	  ready_port: 8000                      # ready once it accepts a connection
//	  ready_command: "test -e /tmp/up"      # and/or once this shell line exits 0
//	  ready_timeout: 60s                    # the bound (default 60s)
type Service struct {
	Start        string   `json:"start,omitempty" yaml:"start,omitempty"`
	Command      []string `json:"command,omitempty" yaml:"command,omitempty"`
	Env          EnvVars  `json:"env,omitempty" yaml:"env,omitempty"`
	Workdir      string   `json:"workdir,omitempty" yaml:"workdir,omitempty"`
	ReadyPort    int      `json:"ready_port,omitempty" yaml:"ready_port,omitempty"`
	ReadyCommand string   `json:"ready_command,omitempty" yaml:"ready_command,omitempty"`
	ReadyTimeout Scalar   `json:"ready_timeout,omitempty" yaml:"ready_timeout,omitempty"`
}

// apply sets spec.Service from s; its errors name the key
// ("service.start", "service.ready_port"...).
func (s *Service) apply(spec *sandbox.Spec) error {
	if s == nil {
		return nil
	}
	var svc sandbox.Service
	switch {
	case s.Start != "" && len(s.Command) > 0:
		return policyErr("service.start", "", errors.New("give start (a shell line) or command (an argv), not both"))
	case strings.TrimSpace(s.Start) != "":
		svc.Command = []string{"/bin/sh", "-c", s.Start}
	case len(s.Command) > 0 && s.Command[0] != "":
		svc.Command = s.Command
	default:
		return policyErr("service.command", "", errors.New("empty: the service needs a start line or a command"))
	}
	for i, kv := range s.Env {
		if _, err := ParseEnv(kv); err != nil {
			return policyErr("service.env["+strconv.Itoa(i)+"]", kv, err)
		}
		svc.Env = append(svc.Env, kv)
	}
	svc.Workdir = s.Workdir
	if s.ReadyPort < 0 || s.ReadyPort > 65535 {
		return policyErr("service.ready_port", strconv.Itoa(s.ReadyPort), errors.New("want a TCP port in 1-65535"))
	}
	svc.ReadyPort = s.ReadyPort
	if strings.TrimSpace(s.ReadyCommand) != "" {
		svc.ReadyCommand = []string{"/bin/sh", "-c", s.ReadyCommand}
	}
	if s.ReadyTimeout != "" {
		d, err := ParseDuration(string(s.ReadyTimeout))
		if err != nil {
			return policyErr("service.ready_timeout", string(s.ReadyTimeout), err)
		}
		svc.ReadyTimeout = d
	}
	if err := svc.Validate(); err != nil {
		return &Error{Where: "service", Err: err}
	}
	spec.Service = &svc
	return nil
}
