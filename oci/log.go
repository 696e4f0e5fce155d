package oci

import (
	"io"
	"log/slog"
)

// newLogger logs to w as runc does (--log-format text or json), at debug
// level with --debug.
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
