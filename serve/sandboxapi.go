package serve

import (
	"log/slog"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/serve/envd"
)

// defaultEnvdVersion is the envd version reported for every sandbox
// when Options.EnvdVersion is "": the SDKs turn features on by it, and
// serve/envd serves each feature up to it (0.4.0: no default user;
// 0.5.2: closing stdin; 0.5.7: octet-stream uploads; 0.6.2: file
// metadata; 0.6.3: entries in watch events; 0.6.4: allow_network_mounts
// in watches, which changes nothing here: tent's watcher, inotify in the
// file helper, never refuses a network mount, and like envd's does not
// see changes made by other hosts).
const defaultEnvdVersion = "0.6.4"

// newSandboxAPI returns the default in-sandbox API over b: package
// serve/envd's handler, its uploads bounded as the server's.
func newSandboxAPI(b sandbox.Backend, opts Options, log *slog.Logger) SandboxAPI {
	return envd.New(b, envd.Options{MaxUploadBytes: opts.MaxUploadBytes, Logger: log.With("api", "envd")})
}
