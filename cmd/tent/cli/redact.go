package cli

import "strings"

// Environment values are secrets (API tokens are what --env is for), so
// tent ls -o json and tent inspect print the names of a sandbox's
// variables, not their values, unless asked with --show-env. The record
// in the state directory keeps them (a 0600 file in the caller's 0700
// directory): a sandbox brought back from a snapshot needs them.

// redactEnv returns rec with its environment values removed: "K=V"
// becomes "K".
func redactEnv(rec *sandboxView) *sandboxView {
	r := *rec
	r.Spec.Env = envNames(rec.Spec.Env)
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
