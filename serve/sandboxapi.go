package serve

import (
	"log/slog"

	"github.com/tent-sandbox/tent/sandbox"
)

// defaultEnvdVersion is the envd version reported for every sandbox
// when Options.EnvdVersion is "": the SDKs turn features on by it
// (0.4.0: no default user; 0.5.2: closing stdin; 0.5.7: octet-stream
// uploads).
const defaultEnvdVersion = "0.5.7"

// newSandboxAPI returns the default in-sandbox API over b: nil until
// package serve/envd is wired in (in-sandbox requests then answer 501).
func newSandboxAPI(b sandbox.Backend, opts Options, log *slog.Logger) SandboxAPI {
	return nil
}
