package fs

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// overlayOptions is an overlay mount's configuration as mountinfo shows
// it: its layers as host paths, and every other option kept as it was.
type overlayOptions struct {
	// lower are the lower layers, the top one first; data the data-only
	// layers below them (after "::", or datadir+).
	lower, data []string
	// upper and work are empty for a lower-only (read-only) overlay.
	upper, work string
	// other are the remaining options in their order: superblock flags
	// (ro, sync, ...) and overlay options (index=, metacopy=,
	// redirect_dir=, xino=, volatile, userxattr, ...).
	other []overlayOption
}

// overlayOption is one option; flag is set for one without "=".
type overlayOption struct {
	key, value string
	flag       bool
}

// maxMountinfoLine bounds one line of /proc/self/mountinfo (an overlay's
// options grow with its layers; the kernel's own limit on a mount's
// options is a page, but mountinfo escapes them).
const maxMountinfoLine = 1 << 20

// mountinfoEntry returns the root, filesystem type and super options of
// the mount whose id is mntID in this thread's /proc/self/mountinfo,
// unescaped.
func mountinfoEntry(mntID uint64) (root, fstype, superOpts string, err error) {
	f, err := os.Open("/proc/thread-self/mountinfo")
	if err != nil {
		return "", "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), maxMountinfoLine)
	want := strconv.FormatUint(mntID, 10)
	for sc.Scan() {
		line := sc.Text()
		id, _, _ := strings.Cut(line, " ")
		if id != want {
			continue
		}
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - TYPE SOURCE SUPEROPTS
		head, tail, ok := strings.Cut(line, " - ")
		hf, tf := strings.Fields(head), strings.Fields(tail)
		if !ok || len(hf) < 6 || len(tf) != 3 {
			return "", "", "", fmt.Errorf("mountinfo: malformed line for mount %d: %q", mntID, line)
		}
		return unescapeOctal(hf[3]), unescapeOctal(tf[0]), tf[2], nil
	}
	if err := sc.Err(); err != nil {
		return "", "", "", fmt.Errorf("reading mountinfo: %w", err)
	}
	return "", "", "", fmt.Errorf("mount %d is not in mountinfo", mntID)
}

// unescapeOctal undoes mountinfo's escapes: the kernel writes a space,
// tab, newline, backslash (and, in an option's value, a comma) as \ooo.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			n, _ := strconv.ParseUint(s[i+1:i+4], 8, 8)
			b.WriteByte(byte(n))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// overlayUnescape undoes overlayfs's own escapes in a lowerdir, upperdir
// or workdir value: a backslash makes the next character literal (\: and
// \, in a path; \\ a backslash).
func overlayUnescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// splitLowerdir splits a lowerdir value ("a:b::c": c is a data-only
// layer) on its unescaped colons and unescapes each layer.
func splitLowerdir(s string) (lower, data []string, err error) {
	var layers []string
	start := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case ':':
			layers = append(layers, s[start:i])
			start = i + 1
		}
	}
	layers = append(layers, s[start:])
	dataAt := -1
	for i, l := range layers {
		if l != "" {
			continue
		}
		// "::" marks the start of the data-only layers; an empty layer
		// anywhere else is malformed.
		if dataAt >= 0 || i == 0 || i == len(layers)-1 {
			return nil, nil, fmt.Errorf("lowerdir %q: an empty layer", s)
		}
		dataAt = i
	}
	for i, l := range layers {
		switch {
		case dataAt < 0 || i < dataAt:
			lower = append(lower, overlayUnescape(l))
		case i > dataAt:
			data = append(data, overlayUnescape(l))
		}
	}
	return lower, data, nil
}

// parseOverlayOptions parses an overlay's super options as mountinfo
// shows them (comma-separated, each value octal-escaped): lowerdir (or
// Linux 6.8's lowerdir+ and datadir+, one layer each, shown without
// overlayfs's escapes), upperdir and workdir become layers; the rest is
// kept. Every layer must be an absolute path: a relative one (a mount
// made from another working directory, as containerd does for a long
// layer list) cannot be found again.
func parseOverlayOptions(superOpts string) (overlayOptions, error) {
	var o overlayOptions
	var lowerdir bool
	for _, opt := range strings.Split(superOpts, ",") {
		if opt == "" {
			continue
		}
		key, value, hasValue := strings.Cut(opt, "=")
		key, value = unescapeOctal(key), unescapeOctal(value)
		var err error
		switch key {
		case "lowerdir":
			if lowerdir || len(o.lower) > 0 || len(o.data) > 0 {
				return o, errors.New("lowerdir given twice")
			}
			lowerdir = true
			o.lower, o.data, err = splitLowerdir(value)
		case "lowerdir+":
			if lowerdir || len(o.data) > 0 {
				return o, errors.New("lowerdir+ mixed with lowerdir, or after datadir+")
			}
			o.lower = append(o.lower, value)
		case "datadir+":
			if lowerdir {
				return o, errors.New("datadir+ mixed with lowerdir")
			}
			o.data = append(o.data, value)
		case "upperdir":
			o.upper = overlayUnescape(value)
		case "workdir":
			o.work = overlayUnescape(value)
		case "rw":
			// The default.
		default:
			o.other = append(o.other, overlayOption{key: key, value: value, flag: !hasValue})
		}
		if err != nil {
			return o, err
		}
	}
	if len(o.lower) == 0 {
		return o, errors.New("no lower layer")
	}
	if (o.upper == "") != (o.work == "") {
		return o, errors.New("upperdir without workdir, or workdir without upperdir")
	}
	for _, p := range o.layers() {
		if !strings.HasPrefix(p, "/") {
			return o, fmt.Errorf("layer %q is a relative path (the overlay was mounted from another working directory): it cannot be found again", p)
		}
	}
	return o, nil
}

// layers lists every layer path: lower, data, upper, work.
func (o *overlayOptions) layers() []string {
	l := append(append([]string{}, o.lower...), o.data...)
	if o.upper != "" {
		l = append(l, o.upper, o.work)
	}
	return l
}
