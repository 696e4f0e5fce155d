package policy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"gopkg.in/yaml.v3"

	"github.com/tent-sandbox/tent/cgroups"
	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/fs/layer"
	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/seccomp"
)

// The parsers below read the textual forms shared by the tent CLI's flags
// and the policy file. Their errors describe what is wrong with the value
// without repeating it: callers name the flag or field and quote the
// value, as in `--memory "-1": size is negative: ...`.

// ParseMount parses the command-line form SRC[:DST] (see fs.ParseMount):
// SRC is relative to cwd, DST defaults to SRC's absolute path.
func ParseMount(spec string, access sandbox.Access, cwd string) (sandbox.Mount, error) {
	return fs.ParseMount(spec, access, cwd)
}

// ParseTier parses "auto" (or ""), "full" or "reduced" (see sandbox.Tier).
func ParseTier(s string) (sandbox.Tier, error) {
	switch s {
	case "", "auto":
		return sandbox.TierAuto, nil
	case string(sandbox.TierFull), string(sandbox.TierReduced):
		return sandbox.Tier(s), nil
	}
	return "", fmt.Errorf("unknown tier %q: want auto, full or reduced", s)
}

// ParseSize parses a byte count, as --memory and a policy's memory: a
// non-negative whole number with an optional suffix K, M, G or T (powers
// of 1024; also written k, KB, KiB, and so on, in any case) or B. See
// cgroups.ParseSize, which it is: the syntax lives with the memory
// limits it spells, so that the sandbox package can format them without
// importing this package.
func ParseSize(s string) (int64, error) { return cgroups.ParseSize(s) }

// FormatSize formats n in the largest unit that divides it exactly, the
// inverse of [ParseSize]: 268435456 is "256M", 1000 is "1000" (see
// cgroups.FormatSize).
func FormatSize(n int64) string { return cgroups.FormatSize(n) }

// ParseDuration parses a Go duration ("500ms", "2s", "1m30s"; see
// time.ParseDuration). Zero ("0", "0s") means no timeout; negative
// durations are rejected.
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("not a duration: want a Go duration such as 500ms, 2s or 1m30s")
	}
	if d < 0 {
		return 0, errors.New("duration is negative: want 0 (no limit) or a positive duration such as 2s")
	}
	return d, nil
}

// ParseUser parses "UID[:GID]": numeric ids only (there is no user
// database inside the sandbox); GID defaults to UID. 4294967295 is
// rejected: the kernel reserves it as "no id".
func ParseUser(s string) (*sandbox.User, error) {
	uidText, gidText, hasGID := strings.Cut(s, ":")
	uid, err := parseID(uidText)
	if err != nil {
		return nil, fmt.Errorf("uid: %w: want UID[:GID], e.g. 1000 or 1000:1000", err)
	}
	gid := uid
	if hasGID {
		if gid, err = parseID(gidText); err != nil {
			return nil, fmt.Errorf("gid: %w: want UID[:GID], e.g. 1000 or 1000:1000", err)
		}
	}
	return &sandbox.User{UID: uid, GID: gid}, nil
}

func parseID(s string) (uint32, error) {
	if s == "" {
		return 0, errors.New("empty")
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, errors.New("not a number (names are not supported)")
		}
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == math.MaxUint32 {
		return 0, errors.New("out of range (0 to 4294967294)")
	}
	return uint32(n), nil
}

// ValidEnvName reports whether name is a portable environment variable
// name: a letter or underscore, then letters, digits or underscores.
func ValidEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i, c := range name {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// ParseEnv checks one "KEY=VALUE" entry (the --env form) and returns it
// unchanged. The value may be empty and may contain '='.
func ParseEnv(kv string) (string, error) {
	k, _, ok := strings.Cut(kv, "=")
	switch {
	case !ok:
		return "", errors.New("not KEY=VALUE")
	case !ValidEnvName(k):
		return "", fmt.Errorf("invalid variable name %q: want letters, digits and '_', not starting with a digit", k)
	}
	return kv, nil
}

// maxEnvLine bounds one line of an env file.
const maxEnvLine = 1 << 20

// ParseEnvFile reads an env file and returns its entries as "KEY=VALUE",
// in file order. The format is Docker's --env-file with the common
// dotenv conveniences:
//
//   - blank lines and lines whose first non-blank character is '#' are
//     skipped;
//   - a line is KEY=VALUE, optionally prefixed with "export ";
//     whitespace around KEY and around an unquoted VALUE is trimmed;
//   - a VALUE enclosed in matching single or double quotes loses them and
//     keeps everything between them verbatim (no escapes, no expansion);
//   - anything else, including '#' after a value, is part of the value.
//
// A line without '=' or with an invalid KEY is an error naming its line
// number. Lines end with LF or CRLF and may be up to 1 MiB long.
func ParseEnvFile(r io.Reader) ([]string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxEnvLine)
	var out []string
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if rest, ok := strings.CutPrefix(text, "export "); ok {
			text = strings.TrimLeft(rest, " \t")
		}
		k, v, ok := strings.Cut(text, "=")
		k = strings.TrimSpace(k)
		if !ok {
			return nil, fmt.Errorf("line %d: %q is not KEY=VALUE", line, k)
		}
		if !ValidEnvName(k) {
			return nil, fmt.Errorf("line %d: invalid variable name %q: want letters, digits and '_', not starting with a digit", line, k)
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		out = append(out, k+"="+v)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("line %d: longer than 1 MiB", line+1)
		}
		return nil, err
	}
	return out, nil
}

// ReadEnvFile reads the env file at path (see [ParseEnvFile]); errors
// name the file.
func ReadEnvFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("failed to read env file: %w", err)
	}
	defer f.Close()
	kvs, err := ParseEnvFile(f)
	if err != nil {
		return nil, fmt.Errorf("env file %s: %w", path, err)
	}
	return kvs, nil
}

// LoadSeccomp resolves a --seccomp value: "default" (tent's built-in
// profile), "unconfined" (no filter, reported as absent) or the path of
// an OCI/Docker JSON profile, relative to dir when not absolute (write
// ./default for a file named "default"). The profile is read and
// validated now (see seccomp.Load) and compiled when the sandbox starts.
func LoadSeccomp(value, dir string) (sandbox.Seccomp, error) {
	switch value {
	case "default":
		return sandbox.Seccomp{}, nil
	case "unconfined":
		return sandbox.Seccomp{Unconfined: true}, nil
	case "":
		return sandbox.Seccomp{}, errors.New("empty value: want default, unconfined or the path of an OCI/Docker seccomp profile")
	}
	path := value
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	p, err := seccomp.Load(path)
	if err != nil {
		return sandbox.Seccomp{}, err
	}
	return sandbox.Seccomp{Profile: p}, nil
}

// ParseNet parses a --net value: "none" (the default, also for ""),
// "limited" or "host" (see netpolicy.ParseMode).
func ParseNet(s string) (netpolicy.Mode, error) { return netpolicy.ParseMode(s) }

// Scalar is a policy value that may be written as a string or a number
// (memory: 256M or memory: 268435456).
type Scalar string

// UnmarshalJSON accepts a JSON string or number.
func (s *Scalar) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err == nil {
		*s = Scalar(str)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return errors.New("want a string or a number")
	}
	*s = Scalar(n)
	return nil
}

// EnvVars is a policy's env: a mapping {KEY: value} (applied in key
// order) or a list of "KEY=VALUE" (applied in order). It holds
// "KEY=VALUE" entries.
type EnvVars []string

// UnmarshalJSON accepts an object of strings, numbers and booleans, or
// an array of strings.
func (e *EnvVars) UnmarshalJSON(b []byte) error {
	var list []string
	if err := json.Unmarshal(b, &list); err == nil {
		*e = list
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return errors.New(`want an object {"KEY": "value"} or an array ["KEY=value"]`)
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		switch v := v.(type) {
		case string:
			out = append(out, k+"="+v)
		case json.Number:
			out = append(out, k+"="+v.String())
		case bool:
			out = append(out, k+"="+strconv.FormatBool(v))
		case nil:
			out = append(out, k+"=")
		default:
			return fmt.Errorf("%s: want a string, number or boolean", k)
		}
	}
	sort.Strings(out)
	*e = out
	return nil
}

// UnmarshalYAML accepts a mapping of scalars or a sequence of strings.
func (e *EnvVars) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.SequenceNode:
		var list []string
		if err := n.Decode(&list); err != nil {
			return err
		}
		*e = list
		return nil
	case yaml.MappingNode:
		out := make([]string, 0, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: env: want KEY: value", k.Line)
			}
			val := v.Value
			if v.Tag == "!!null" {
				val = ""
			}
			out = append(out, k.Value+"="+val)
		}
		sort.Strings(out)
		*e = out
		return nil
	}
	return fmt.Errorf("line %d: env: want a mapping {KEY: value} or a list [KEY=value]", n.Line)
}

// QuotePath returns a path a sandbox chose as it is safe to print: plain
// printable ASCII unchanged, anything else in double quotes with C
// escapes (as git quotes paths), so that a file name can neither forge a
// line of output nor reach a terminal as an escape sequence.
func QuotePath(p string) string { return layer.QuoteName(p) }

// ParseSeccomp reads an OCI/Docker JSON seccomp profile from data (for
// example an OCI bundle's linux.seccomp), validated now (see
// seccomp.Parse) and compiled when the sandbox starts.
func ParseSeccomp(data []byte) (sandbox.Seccomp, error) {
	p, err := seccomp.Parse(data)
	if err != nil {
		return sandbox.Seccomp{}, err
	}
	return sandbox.Seccomp{Profile: p}, nil
}

// ValidName reports whether name may name a sandbox, a template or a
// snapshot: 1 to 128 ASCII letters, digits, '_', '.' and '-', starting
// with a letter or a digit (so never a path, a hidden file or an option).
func ValidName(name string) bool {
	if name == "" || len(name) > 128 {
		return false
	}
	for i, c := range []byte(name) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '_' || c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// ParseSignal reads a signal as kill(1) and runc take it: a number from 1
// to 64, or a name with or without SIG, in any case (TERM, sigkill).
func ParseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > 64 {
			return 0, fmt.Errorf("signal %s: want 1-64", s)
		}
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("unknown signal %q: want a number (1-64) or a name such as TERM, KILL, INT, HUP", s)
}
