package oci_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// An ordinary Debian image (scripts/debian-image: nginx, redis,
// postgresql and python3 from Debian's packages, their users made by
// their packages' scripts) run as a CRI pod on the tent handler, under
// RuntimeDefault seccomp, each server as its image means it to run:
// nginx's master as root and its workers as www-data, serving a page
// written into the image's root-owned /var/www/html through a hostPort
// (CNI portmap, in containerd's own network namespace); redis as the
// image's redis, saving into its image-owned /var/lib/redis, answering
// PING from a second container; postgres as the image's postgres,
// initialising its data directory under its image-owned home, ready by
// an exec probe and answering psql. make test-cri sets
// TENT_DEBIAN_IMAGE; without it the test skips.
func TestCRIDebianImage(t *testing.T) {
	rootfs := os.Getenv("TENT_DEBIAN_IMAGE")
	if rootfs == "" {
		t.Skip("TENT_DEBIAN_IMAGE (scripts/debian-image's tarball; make test-cri) is not set")
	}
	need(t, fileExists(rootfs), rootfs+" missing")
	netnsBefore := listDir(t, "/var/run/netns")
	// Pulled, as kubelet would, from a registry on the loopback of
	// containerd's network namespace, which docker.io names.
	addr := fmt.Sprintf("127.0.0.1:%d", registryPort)
	e := newCRIEnv(t, fmt.Sprintf("[plugins.\"io.containerd.grpc.v1.cri\".registry]\n  [plugins.\"io.containerd.grpc.v1.cri\".registry.mirrors.\"docker.io\"]\n    endpoint = [\"http://%s\"]\n", addr))
	var ln net.Listener
	if err := inNetns(e.netnsPID, func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	img := rootfsImage(t, rootfs)
	registry(t, ln, func(string) image { return img })
	const name = "docker.io/library/tent-debian:test"
	if out, errOut, code := e.crictl("pull", name); code != 0 {
		t.Fatalf("crictl pull %s: %d %s %s", name, code, out, errOut)
	}

	const hostPort = 18080
	runtimeDefault := map[string]any{"seccomp": map[string]any{"profile_type": 0}} // RuntimeDefault
	podID, pod := e.runPod(t, map[string]any{
		"metadata":      map[string]any{"name": "debian", "namespace": "default", "uid": "debian-uid", "attempt": 0},
		"log_directory": filepath.Join(e.dir, "logs"),
		"hostname":      "debian",
		"port_mappings": []any{map[string]any{"protocol": 0, "container_port": 80, "host_port": hostPort}},
		"linux":         map[string]any{"security_context": runtimeDefault},
	})
	ctrs := map[string]string{}
	for _, c := range []struct {
		name, user string
		cmd        []string
	}{
		{"nginx", "", []string{"sh", "-c", `echo "tent-nginx-$((6*7))" > /var/www/html/index.html && exec nginx -g 'daemon off;'`}},
		{"redis", "redis", []string{"redis-server", "--port", "6379", "--bind", "127.0.0.1", "--dir", "/var/lib/redis", "--save", ""}},
		{"client", "", []string{"sh", "-c", "echo to-stderr >&2; exec sleep infinity"}},
		{"postgres", "postgres", []string{"sh", "-c", "/usr/lib/postgresql/15/bin/initdb -D /var/lib/postgresql/data && exec /usr/lib/postgresql/15/bin/postgres -D /var/lib/postgresql/data -k /tmp -c listen_addresses=''"}},
	} {
		sc := map[string]any{"seccomp": runtimeDefault["seccomp"], "namespace_options": map[string]any{"pid": 1}}
		if c.user != "" {
			// As a pod spec's runAsUser of the image's own user would.
			sc["run_as_username"] = c.user
		}
		ctrs[c.name] = e.startContainer(t, podID, pod, map[string]any{
			"metadata": map[string]any{"name": c.name},
			"image":    map[string]any{"image": name},
			"command":  c.cmd,
			"log_path": c.name + ".log",
			"linux":    map[string]any{"security_context": sc},
		})
	}
	// Each server is up: its exec probe (as kubelet's readiness probe
	// runs it) succeeds.
	for name, probe := range map[string][]string{
		"nginx":    {"sh", "-c", "test -s /run/nginx.pid"},
		"redis":    {"redis-cli", "ping"},
		"postgres": {"/usr/lib/postgresql/15/bin/pg_isready", "-h", "/tmp"},
	} {
		waitFor(t, name+"'s readiness probe", 90*time.Second, func() bool {
			_, _, code := e.crictl(append([]string{"exec", "-s", ctrs[name]}, probe...)...)
			return code == 0
		}, func() string { out, logs, _ := e.crictl("logs", ctrs[name]); return out + logs })
	}

	// nginx through the pod's hostPort, from containerd's network
	// namespace (the node's, for this pod).
	if got := httpGetIn(t, e.netnsPID, net.JoinHostPort(e.gateway(), strconv.Itoa(hostPort))); !strings.Contains(got, "tent-nginx-42") {
		t.Errorf("GET / through hostPort %d: %q, want the page the container wrote", hostPort, got)
	}
	// Its workers run as the image's www-data, its master as root.
	uids, errOut, _ := e.crictl("exec", "-s", ctrs["nginx"], "sh", "-c",
		`for p in /proc/[0-9]*; do echo "$(tr '\0' ' ' < $p/cmdline)| $(grep '^Uid:' $p/status | cut -f2)"; done`)
	if !procUID(uids, "nginx: worker process", "33") || !procUID(uids, "nginx: master process", "0") {
		t.Errorf("nginx's processes and their uids:\n%s%s\nwant the master as 0, workers as 33 (www-data)", uids, errOut)
	}
	// The pod's hostPort rules are in containerd's network namespace,
	// not the machine's.
	if out, err := exec.Command("iptables-save", "-t", "nat").CombinedOutput(); err != nil || strings.Contains(string(out), "CNI-HOSTPORT") {
		t.Errorf("the machine's own nat table (%v) has CNI's hostPort rules:\n%s", err, out)
	}

	// redis, from the pod's second container, over its loopback; it
	// saves into its image-owned directory as the image's redis.
	for _, c := range [][2]string{{"ping", "PONG"}, {"set tent 42", "OK"}, {"get tent", "42"}, {"save", "OK"}} {
		out, errOut, _ := e.crictl(append([]string{"exec", "-s", ctrs["client"], "redis-cli", "-h", "127.0.0.1"}, strings.Fields(c[0])...)...)
		if out != c[1] {
			t.Errorf("redis-cli %s from the client container: %q %s, want %q", c[0], out, errOut, c[1])
		}
	}
	if out, errOut, _ := e.crictl("exec", "-s", ctrs["redis"], "sh", "-c", "id -un; stat -c %U /var/lib/redis/dump.rdb"); out != "redis\nredis" {
		t.Errorf("redis's user and its dump's owner: %q %s, want redis twice", out, errOut)
	}

	// postgres answers psql, as the image's postgres, its data directory
	// its own.
	if out, errOut, _ := e.crictl("exec", "-s", ctrs["postgres"], "psql", "-h", "/tmp", "-d", "postgres", "-At", "-c", "select current_user, 6*7"); out != "postgres|42" {
		t.Errorf("psql: %q %s, want postgres|42", out, errOut)
	}
	// crictl logs gives a container's stderr on its own stderr.
	if _, logs, _ := e.crictl("logs", ctrs["postgres"]); !strings.Contains(logs, "database system is ready to accept connections") {
		t.Errorf("crictl logs of postgres: no ready line in\n%s", tail([]byte(logs), 1500))
	}
	if _, logs, _ := e.crictl("logs", ctrs["client"]); !strings.Contains(logs, "to-stderr\n") {
		t.Errorf("crictl logs of the client, its stderr: %q, want to-stderr", logs)
	}
	// python3 of the image runs, as the image's root.
	if out, errOut, _ := e.crictl("exec", "-s", ctrs["client"], "python3", "-c", "import os; print(os.getuid(), 6*7)"); out != "0 42" {
		t.Errorf("python3: %q %s, want 0 42", out, errOut)
	}
	// crictl exec -it, as a user debugging the pod types it: a terminal
	// (script(1) gives crictl one), the image's bash on it.
	need(t, lookPath("script"), "script(1) missing (apt-get install bsdutils)")
	bin := os.Getenv("TENT_CRICTL")
	if bin == "" {
		bin = "crictl"
	}
	line := fmt.Sprintf("nsenter --net=/proc/%d/ns/net -- %s --runtime-endpoint unix://%s exec -it %s bash -c 'tty; echo in-$BASH_VERSION'", e.netnsPID, bin, e.sock, ctrs["client"])
	out, _ := exec.Command("script", "-qec", line, "/dev/null").CombinedOutput()
	if !strings.Contains(string(out), "/dev/pts/") || !strings.Contains(string(out), "in-5.") {
		t.Errorf("crictl exec -it bash: %q, want a /dev/pts terminal and bash 5", out)
	}

	for _, id := range ctrs {
		if _, errOut, code := e.crictl("stop", "-t", "10", id); code != 0 {
			t.Errorf("crictl stop: %d %s", code, errOut)
		}
	}
	if _, errOut, code := e.crictl("stopp", podID); code != 0 {
		t.Errorf("crictl stopp: %d %s", code, errOut)
	}
	if _, errOut, code := e.crictl("rmp", podID); code != 0 {
		t.Errorf("crictl rmp: %d %s", code, errOut)
	}
	// Nothing of the pod is left: no process of its servers, no cgroup
	// beneath containerd's parent, its network namespace gone. The
	// harness checks the rest at the end (tent-runc's state, shims,
	// mounts).
	ids := []string{podID}
	for _, id := range ctrs {
		ids = append(ids, id)
	}
	if left := processesInCgroups(ids); len(left) > 0 {
		t.Errorf("processes left in the pod's cgroups after its removal: %v", left)
	}
	for _, id := range ids {
		if dirs, _ := filepath.Glob("/sys/fs/cgroup/*/k8s.io/" + id); len(dirs) > 0 {
			t.Errorf("cgroups left after the pod's removal: %v", dirs)
		}
	}
	if after := listDir(t, "/var/run/netns"); len(after) != len(netnsBefore) {
		t.Errorf("/var/run/netns: %v before, %v after", netnsBefore, after)
	}
}

// processesInCgroups lists the host's processes ("pid cgroup-line") in
// a cgroup whose path names one of ids (containerd's cgroupfs paths,
// /k8s.io/ID, are the containers' and the pod's).
func processesInCgroups(ids []string) []string {
	var found []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/cgroup")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			for _, id := range ids {
				if strings.Contains(line, "/"+id) {
					found = append(found, filepath.Base(d)+" "+line)
				}
			}
		}
	}
	return found
}

// procUID says whether some line of the listing above ("cmdline| uid")
// is of a process whose command line holds what, running as uid.
func procUID(listing, what, uid string) bool {
	for _, line := range strings.Split(listing, "\n") {
		cmd, u, ok := strings.Cut(line, "| ")
		if ok && strings.Contains(cmd, what) && u == uid {
			return true
		}
	}
	return false
}

func listDir(t *testing.T, dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// waitFor polls cond for up to d (a server's start in a fresh image:
// initdb), reporting what() on a time-out.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool, report func() string) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s; its logs:\n%s", what, report())
		}
	}
}

// httpGetIn is a GET / of addr from the network namespace of pid (the
// connection made there, see inNetns), retried for a while.
func httpGetIn(t *testing.T, pid int, addr string) string {
	t.Helper()
	var body []byte
	err := inNetns(pid, func() error {
		var last error
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				last = err
				continue
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: tent\r\n\r\n")
			body, err = io.ReadAll(bufio.NewReader(c))
			return err
		}
		return last
	})
	if err != nil {
		t.Errorf("GET %s in pid %d's network namespace: %v", addr, pid, err)
	}
	return string(body)
}

// rootfsImage is an image whose one layer is the root filesystem
// tarball rootfs as it is (an uncompressed layer, served from its file);
// its config runs bash, with Debian's PATH.
func rootfsImage(t *testing.T, rootfs string) image {
	t.Helper()
	f, err := os.Open(rootfs)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	size, err := io.Copy(h, f)
	if err != nil {
		t.Fatal(err)
	}
	layer := "sha256:" + hex.EncodeToString(h.Sum(nil))
	img := image{blobs: map[string][]byte{}, files: map[string]string{layer: rootfs}}
	cfg, cfgSize := img.putJSON(t, map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Env": []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, "Cmd": []string{"bash"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layer}},
	})
	img.manifest, _ = img.putJSON(t, map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg, "size": cfgSize},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer, "size": size}},
	})
	return img
}
