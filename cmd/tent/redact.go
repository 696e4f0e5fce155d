package main

import (
	"strings"

	"github.com/tent-sandbox/tent/sandbox"
)

// Environment values are secrets (API tokens are what --env is for), so
// tent ls -o json and tent inspect print the names of a sandbox's
// variables, not their values, unless asked with --show-env. The record
// in the state directory keeps them (a 0600 file in the caller's 0700
// directory): a sandbox brought back from a snapshot needs them.

// redactEnv returns rec with its environment values removed: "K=V"
// becomes "K", in the spec and in the create flags (--env K=V and
// --env=K=V).
func redactEnv(rec *sandbox.Record) *sandbox.Record {
	r := *rec
	r.Spec.Env = envNames(rec.Spec.Env)
	r.Args = make([]string, len(rec.Args))
	for i, a := range rec.Args {
		switch {
		case i > 0 && rec.Args[i-1] == "--env":
			a, _, _ = strings.Cut(a, "=")
		case strings.HasPrefix(a, "--env="):
			k, _, _ := strings.Cut(strings.TrimPrefix(a, "--env="), "=")
			a = "--env=" + k
		}
		r.Args[i] = a
	}
	if rec.Args == nil {
		r.Args = nil
	}
	return &r
}

// envNames returns the names of KEY=VALUE pairs (nil for nil).
func envNames(env []string) []string {
	if env == nil {
		return nil
	}
	names := make([]string, len(env))
	for i, kv := range env {
		names[i], _, _ = strings.Cut(kv, "=")
	}
	return names
}
