package namespaces

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/tent-sandbox/tent/internal/ctlmsg"
)

// The control socket is an *os.File (ctlmsg.NewConn) rather than a
// net.UnixConn: the init starts from this package's initialisation, and
// importing package net would put it behind every package net's imports
// wait for (see internal/ctlmsg).

// send sends m with fds attached. A Config's seccomp program (8 bytes an
// instruction, about 9 KiB for the default policy) travels after the
// JSON rather than in it as base64 (ctlmsg.SendTail): decoding it from
// JSON was about 0.2 ms of the init's start.
func send(c *os.File, m message, fds []int) error {
	var tail []byte
	if m.Config != nil && len(m.Config.Seccomp) > 0 {
		cfg := *m.Config
		tail, cfg.Seccomp = cfg.Seccomp, nil
		m.Config = &cfg
	}
	if err := ctlmsg.SendTail(c, m, tail, fds); err != nil {
		return fmt.Errorf("sending %s: %w", m.Type, err)
	}
	return nil
}

// recv reads one message and its descriptors (close-on-exec); a Config's
// seccomp program is the message's tail (send).
func recv(c *os.File) (message, []int, error) {
	var m message
	fds, tail, err := ctlmsg.RecvTail(c, &m)
	if err != nil {
		return m, fds, err
	}
	if len(tail) > 0 {
		if m.Config == nil || len(m.Config.Seccomp) > 0 {
			closeAll(fds)
			return message{}, nil, fmt.Errorf("decoding control message: unexpected bytes after a %q message", m.Type)
		}
		m.Config.Seccomp = tail
	}
	return m, fds, err
}

func closeAll(fds []int) { ctlmsg.Close(fds) }

// plainMessage is message without its MarshalJSON: what encoding/json
// makes of it.
type plainMessage message

// MarshalJSON encodes m exactly as encoding/json encodes plainMessage(m).
// The messages an init sends (hello, started, exit, error, done) hold
// only numbers and short strings, and are written here directly:
// encoding/json would first build an encoder for every type a message
// can carry — the whole Config with its mount plan — a few hundred
// microseconds on the path of every sandbox start, in a process that
// never sends a Config. A message with a nested value, or a string that
// needs escaping, goes through encoding/json.
func (m message) MarshalJSON() ([]byte, error) {
	if m.Exec != nil || m.Attach != nil || m.Config != nil ||
		!plainJSONString(m.Type) || !plainJSONString(m.ID) || !plainJSONString(m.Stage) || !plainJSONString(m.Error) {
		return json.Marshal(plainMessage(m))
	}
	b := make([]byte, 0, 64+len(m.Error))
	b = append(b, `{"type":"`...)
	b = append(b, m.Type...)
	b = append(b, '"')
	str := func(key, v string) {
		if v != "" {
			b = append(b, `,"`+key+`":"`...)
			b = append(b, v...)
			b = append(b, '"')
		}
	}
	num := func(key string, v int64) {
		if v != 0 {
			b = append(b, `,"`+key+`":`...)
			b = strconv.AppendInt(b, v, 10)
		}
	}
	str("id", m.ID)
	if len(m.Ports) > 0 {
		b = append(b, `,"ports":[`...)
		for i, p := range m.Ports {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(p), 10)
		}
		b = append(b, ']')
	}
	num("port", int64(m.Port))
	if m.V6 {
		b = append(b, `,"v6":true`...)
	}
	num("pid", int64(m.Pid))
	num("status", int64(m.Status))
	num("signal", int64(m.Signal))
	str("stage", m.Stage)
	str("error", m.Error)
	num("errno", int64(m.Errno))
	if m.TTY {
		b = append(b, `,"tty":true`...)
	}
	if len(m.Stamps) > 0 {
		b = append(b, `,"stamps":[`...)
		for i, v := range m.Stamps {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, v, 10)
		}
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

// plainJSONString reports whether s is written in JSON as it is between
// quotes: printable ASCII without '"', '\\' or the characters
// encoding/json escapes for HTML ('<', '>', '&').
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
