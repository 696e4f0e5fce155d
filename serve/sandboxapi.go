package serve

import (
	"log/slog"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/serve/envd"
)

// defaultEnvdVersion is the envd version reported for every sandbox
// when Options.EnvdVersion is "": the SDKs turn features on by it
// (0.4.0: no default user; 0.5.2: closing stdin; 0.5.7: octet-stream
// uploads; 0.6.2: file metadata, which serve/envd refuses clearly;
// 0.6.3: entries in watch events).
const defaultEnvdVersion = "0.6.3"

// newSandboxAPI returns the default in-sandbox API over b: package
// serve/envd's handler, its uploads bounded as the server's.
func newSandboxAPI(b sandbox.Backend, opts Options, log *slog.Logger) SandboxAPI {
	return envd.New(b, envd.Options{MaxUploadBytes: opts.MaxUploadBytes, Logger: log.With("api", "envd")})
}
