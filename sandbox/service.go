package sandbox

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
)

// defaultServiceReadyTimeout bounds a [Service]'s readiness when its
// ReadyTimeout is 0.
const defaultServiceReadyTimeout = 60 * time.Second

// Service is a command a sandbox runs for as long as it lives, as an E2B
// template's start command: a server the sandbox's users reach through
// its ports. Package supervised's supervisor starts it in every
// incarnation of the sandbox (provision, resume of a stopped sandbox,
// fork, create from a snapshot) before it answers that the sandbox is
// ready, waits for its readiness check, and starts it again, with a
// bounded backoff, whenever it exits. It is a [Process] of the sandbox
// (tagged "service"), listed by [Handle.Processes]. [Local] refuses a
// spec with a service (ErrUnsupported): it has no supervisor to keep it.
type Service struct {
	// Command is the service's argv (a shell line is
	// []string{"/bin/sh", "-c", line}). It runs as the sandbox's
	// commands do (its user, environment and working directory), with
	// Env layered over the sandbox's environment and Workdir, when not
	// "", as its working directory.
	Command []string `json:"command"`
	Env     []string `json:"env,omitempty"`
	Workdir string   `json:"workdir,omitempty"`
	// ReadyPort, when not 0, is a TCP port inside the sandbox: the
	// service is ready once a connection to it is accepted. ReadyCommand,
	// when set, is a command run inside until it exits 0. Without
	// either, the service is ready once it has started. Both may be set:
	// then both must pass.
	ReadyPort    int      `json:"ready_port,omitempty"`
	ReadyCommand []string `json:"ready_command,omitempty"`
	// ReadyTimeout bounds the wait for readiness (0 means 60 seconds: see
	// [Service.ReadyBound]); a service not ready by then fails the
	// sandbox's creation.
	ReadyTimeout time.Duration `json:"ready_timeout,omitempty"`
}

// ReadyBound is how long the service may take to be ready: ReadyTimeout,
// or 60 seconds when it is 0.
func (s *Service) ReadyBound() time.Duration {
	if s.ReadyTimeout > 0 {
		return s.ReadyTimeout
	}
	return defaultServiceReadyTimeout
}

// Validate checks s (nil is valid), naming the field at fault, such as
// "service.command" or "service.ready_port".
func (s *Service) Validate() error {
	if s == nil {
		return nil
	}
	switch {
	case len(s.Command) == 0 || s.Command[0] == "":
		return errors.New("service.command: empty: the service needs a command")
	case s.ReadyPort < 0 || s.ReadyPort > 65535:
		return fmt.Errorf("service.ready_port: %d is not in 1-65535", s.ReadyPort)
	case len(s.ReadyCommand) > 0 && s.ReadyCommand[0] == "":
		return errors.New("service.ready_command: its program is empty")
	case s.ReadyTimeout < 0:
		return fmt.Errorf("service.ready_timeout: %s is negative", s.ReadyTimeout)
	case s.Workdir != "" && (!path.IsAbs(s.Workdir) || path.Clean(s.Workdir) != s.Workdir):
		return fmt.Errorf("service.workdir: %q must be an absolute, clean path inside the sandbox", s.Workdir)
	}
	for _, e := range s.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("service.env: %q is not KEY=VALUE", e)
		}
	}
	return nil
}
