package files

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

func lstatInfo(path string) (FileInfo, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return FileInfo{}, err
	}
	info := FileInfo{Name: fi.Name(), Size: fi.Size(), Mode: fi.Mode(), ModTime: fi.ModTime().UTC(), IsDir: fi.IsDir()}
	if fi.Mode()&os.ModeSymlink != 0 {
		info.Link, _ = os.Readlink(path)
	}
	if abs, err := filepath.Abs(path); err == nil {
		info.Path = abs
	}
	if info.Link != "" && info.Path != "" {
		info.Target = linkTarget(info.Path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		info.UID, info.GID = int(st.Uid), int(st.Gid)
		info.Owner, info.Group = idNames().user[info.UID], idNames().group[info.GID]
	}
	if fi.Mode()&os.ModeSymlink == 0 {
		info.Metadata = readMetadata(path)
	}
	return info, nil
}

// linkTarget is what the symlink at abs resolves to, or nil when it
// resolves to nothing (a dangling link, a loop, a target it may not
// search).
func linkTarget(abs string) *LinkTarget {
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil
	}
	fi, err := os.Stat(resolved)
	if err != nil {
		return nil
	}
	return &LinkTarget{Path: resolved, Mode: fi.Mode()}
}

// metadataArgs splits put's arguments into the optional mode and the
// metadata given as "meta NAME VALUE" triples.
func metadataArgs(path string, rest []string) ([]string, map[string]string, error) {
	i := 0
	if len(rest) > 0 && rest[0] != "meta" {
		i = 1
	}
	meta := map[string]string{}
	for ; i < len(rest); i += 3 {
		if rest[i] != "meta" || i+2 >= len(rest) {
			return nil, nil, &os.PathError{Op: "put", Path: path, Err: fmt.Errorf("want meta NAME VALUE, not %q: %w", rest[i:], unix.EINVAL)}
		}
		name, value := rest[i+1], rest[i+2]
		if name == "" || len(name) > MaxMetadataName || len(value) > MaxMetadataValue || strings.ContainsRune(name, 0) {
			return nil, nil, &os.PathError{Op: "put", Path: path, Err: fmt.Errorf("metadata %q: a name of 1 to %d bytes and a value of at most %d: %w", name, MaxMetadataName, MaxMetadataValue, unix.EINVAL)}
		}
		meta[name] = value
	}
	if len(meta) > MaxMetadataEntries {
		return nil, nil, &os.PathError{Op: "put", Path: path, Err: fmt.Errorf("%d metadata entries, at most %d: %w", len(meta), MaxMetadataEntries, unix.EINVAL)}
	}
	if i == 1 {
		return rest[:1], meta, nil
	}
	return nil, meta, nil
}

// setMetadata replaces path's metadata (its MetadataXattrPrefix
// attributes) with meta.
func setMetadata(path string, meta map[string]string) error {
	for name := range metadataNames(path) {
		if err := unix.Lremovexattr(path, MetadataXattrPrefix+name); err != nil && err != unix.ENODATA {
			return &os.PathError{Op: "removexattr", Path: path, Err: err}
		}
	}
	for name, value := range meta {
		if err := unix.Lsetxattr(path, MetadataXattrPrefix+name, []byte(value), 0); err != nil {
			return &os.PathError{Op: "setxattr", Path: path, Err: err}
		}
	}
	return nil
}

// metadataNames lists path's metadata names (without the prefix), at
// most MaxMetadataEntries; none when the file system has no extended
// attributes.
func metadataNames(path string) map[string]struct{} {
	buf := make([]byte, 64<<10)
	n, err := unix.Llistxattr(path, buf)
	if err != nil || n <= 0 {
		return nil
	}
	names := map[string]struct{}{}
	for _, a := range strings.Split(string(buf[:n]), "\x00") {
		if name, ok := strings.CutPrefix(a, MetadataXattrPrefix); ok && name != "" && len(names) < MaxMetadataEntries {
			names[name] = struct{}{}
		}
	}
	return names
}

// readMetadata reads path's metadata; nil when it has none.
func readMetadata(path string) map[string]string {
	names := metadataNames(path)
	if len(names) == 0 {
		return nil
	}
	meta := make(map[string]string, len(names))
	buf := make([]byte, MaxMetadataValue)
	for name := range names {
		if n, err := unix.Lgetxattr(path, MetadataXattrPrefix+name, buf); err == nil {
			meta[name] = string(buf[:n])
		}
	}
	return meta
}

// encodeInfo writes the FileInfo of path to w as JSON.
func encodeInfo(path string, w io.Writer) error {
	fi, err := lstatInfo(path)
	if err != nil {
		return err
	}
	return json.NewEncoder(w).Encode(fi)
}

// listTree writes, as one JSON array, the FileInfo of every entry beneath
// the directory at path down to depth levels (1: its entries only), each
// directory's entries in name order and followed by its own (pre-order);
// symlinks are listed, never followed below path. Entries that vanish
// meanwhile are left out. It streams: nothing is held but the current
// directories.
func listTree(path string, depth int, w io.Writer) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	first := true
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		ents, err := os.ReadDir(dir)
		if err != nil && level == 1 {
			return err // path itself
		} else if err != nil {
			return nil // a subdirectory unreadable or gone: skipped
		}
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			fi, err := lstatInfo(p)
			if err != nil {
				continue
			}
			sep := ","
			if first {
				sep, first = "[", false
			}
			if _, err := bw.WriteString(sep); err != nil {
				return err
			}
			if err := enc.Encode(fi); err != nil {
				return err
			}
			if fi.IsDir && level < depth {
				if err := walk(p, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(path, 1); err != nil {
		return err
	}
	end := "]\n"
	if first {
		end = "[]\n"
	}
	if _, err := bw.WriteString(end); err != nil {
		return err
	}
	return bw.Flush()
}

// names maps the sandbox's uids and gids to their names.
type names struct{ user, group map[int]string }

var (
	namesOnce sync.Once
	namesVal  names
)

// idNames reads /etc/passwd and /etc/group, as the sandbox sees them,
// once per helper run (at most 1 MiB of each).
func idNames() names {
	namesOnce.Do(func() {
		namesVal = names{user: readIDFile("/etc/passwd"), group: readIDFile("/etc/group")}
	})
	return namesVal
}

// readIDFile maps the id (third field) of each "name:x:id:..." line of
// file to its name; the first line of an id wins.
func readIDFile(file string) map[int]string {
	m := map[int]string{}
	f, err := os.Open(file)
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		fields := strings.SplitN(sc.Text(), ":", 4)
		if len(fields) < 3 || fields[0] == "" || strings.HasPrefix(fields[0], "#") {
			continue
		}
		id, err := strconv.Atoi(fields[2])
		if _, dup := m[id]; err != nil || dup {
			continue
		}
		m[id] = fields[0]
	}
	return m
}
