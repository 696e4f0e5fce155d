package netpolicy

import (
	"bufio"
	"bytes"
	"io"
	"net/netip"
	"os"
	"sync"
	"time"
)

// DefaultHostsFile is the hosts file the stub DNS reads (see
// [ProxyConfig.HostsFile]): the one the host's resolver reads first.
const DefaultHostsFile = "/etc/hosts"

// maxHostsFile bounds what is read of a hosts file.
const maxHostsFile = 4 << 20

// hostsFile is the host's hosts file as the stub DNS reads it: read
// again when its size or modification time changes. It is only ever
// read: never a network lookup.
type hostsFile struct {
	path string

	mu     sync.Mutex
	size   int64
	mtime  time.Time
	byName map[string][]netip.Addr
}

// lookup returns the addresses the file lists for name (normalized).
func (h *hostsFile) lookup(name string) []netip.Addr {
	h.mu.Lock()
	defer h.mu.Unlock()
	fi, err := os.Stat(h.path)
	switch {
	case err != nil:
		h.byName, h.size, h.mtime = nil, 0, time.Time{}
	case fi.Size() != h.size || !fi.ModTime().Equal(h.mtime) || h.byName == nil:
		h.size, h.mtime = fi.Size(), fi.ModTime()
		h.byName = readHosts(h.path)
	}
	return h.byName[name]
}

// readHosts parses a hosts file: "ADDRESS NAME [ALIAS...]" lines, "#"
// comments. Names are normalized; lines that do not parse are skipped,
// as the resolver skips them.
func readHosts(path string) map[string][]netip.Addr {
	m := map[string][]netip.Addr{}
	f, err := os.Open(path)
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, maxHostsFile))
	sc.Buffer(nil, 64<<10)
	for sc.Scan() {
		line := sc.Bytes()
		if i := bytes.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := bytes.Fields(line)
		if len(fields) < 2 {
			continue
		}
		a, err := netip.ParseAddr(string(fields[0]))
		if err != nil || a.Zone() != "" {
			continue
		}
		for _, n := range fields[1:] {
			name := normalizeHost(string(n))
			m[name] = append(m[name], a.Unmap())
		}
	}
	return m
}
