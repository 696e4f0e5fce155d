package oci

import (
	"io"
	"log/slog"
	"os"
)

// openLogger returns a logger writing to path (--log) as JSON lines or
// text (--log-format), at debug level with --debug; without a path it
// discards. The file is opened for appending, created 0600.
func openLogger(path, format string, debug bool) (*slog.Logger, func()) {
	if path == "" {
		return slog.New(slog.DiscardHandler), func() {}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return slog.New(slog.DiscardHandler), func() {}
	}
	return newLogger(f, format, debug), func() { f.Close() }
}

func newLogger(w io.Writer, format string, debug bool) *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	if debug {
		opts.Level = slog.LevelDebug
	}
	// runc's JSON log lines name the message "msg" and the level in
	// lower case, which is what containerd's shim looks for.
	opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
		if a.Key == slog.LevelKey && len(groups) == 0 {
			if l, ok := a.Value.Any().(slog.Level); ok {
				return slog.String(slog.LevelKey, lower(l.String()))
			}
		}
		return a
	}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
