//go:build linux

package sandbox_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
)

// getUntil GETs url until it answers (a server inside is starting),
// within a generous deadline, and returns the body.
func getUntil(t *testing.T, url string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return string(b)
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPublishedPorts: python's http.server inside is reached from the
// host through a published port (at provision and added at run time, on
// 127.0.0.1 and on ::1 inside); a port nothing listens on inside resets;
// a flood stays bounded; terminating removes the host listeners.
func TestPublishedPorts(t *testing.T) {
	needTools(t, "python3")
	ctx := context.Background()
	sb, err := sandbox.Provision(ctx, sandbox.Spec{Networking: sandbox.Networking{Ports: []sandbox.PortMapping{{Port: 8000}}}}, sandbox.ProvisionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(ctx)
	ports := sb.Info().Spec.Ports
	if len(ports) != 1 || ports[0].Port != 8000 || ports[0].HostPort == 0 {
		t.Fatalf("Ports() = %v", ports)
	}
	if got := sb.Info().Spec.Ports; len(got) != 1 || got[0] != ports[0] {
		t.Errorf("Spec().Ports = %v, want %v", got, ports)
	}
	host := "127.0.0.1:" + strconv.Itoa(ports[0].HostPort)
	start := func(args string) {
		t.Helper()
		r, err := sb.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo published > /tmp/marker.txt; setsid python3 -m http.server " + args + " --directory /tmp </dev/null >/dev/null 2>&1 &"}})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("starting the server: %v %+v", err, r)
		}
	}
	start("8000 --bind 127.0.0.1")
	if body := getUntil(t, "http://"+host+"/marker.txt"); body != "published\n" {
		t.Errorf("through the published port: %q", body)
	}

	// Added at run time, to a server on ::1 only.
	m, err := sb.Publish(ctx, sandbox.PortMapping{Port: 8001})
	if err != nil {
		t.Fatal(err)
	}
	start("8001 --bind ::1")
	if body := getUntil(t, fmt.Sprintf("http://127.0.0.1:%d/marker.txt", m.HostPort)); body != "published\n" {
		t.Errorf("through a port published at run time: %q", body)
	}
	if got := sb.Info().Spec.Ports; len(got) != 2 || got[1] != m {
		t.Errorf("Ports() = %v after publishing %v", got, m)
	}
	// The host's listener is not reachable from inside: there, its
	// address is the sandbox's own loopback.
	r, err := sb.Exec(ctx, sandbox.ExecRequest{Args: []string{"python3", "-c", pyConnect, "127.0.0.1", strconv.Itoa(m.HostPort)}})
	if err != nil || strings.TrimSpace(string(r.Stdout)) != "ConnectionRefusedError" {
		t.Errorf("the host port from inside: %v %q, want ConnectionRefusedError", err, r.Stdout)
	}
	if _, err := sb.Publish(ctx, sandbox.PortMapping{Port: 0}); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("publishing port 0: %v, want ErrInvalidSpec", err)
	}

	// Nothing listens on 8002 inside: the client is reset.
	idle, err := sb.Publish(ctx, sandbox.PortMapping{Port: 8002})
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", idle.HostPort))
	if err == nil { // else reset already
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("a port nothing listens on inside: %v, want ECONNRESET", err)
	}

	checkPublishedFlood(t, host)

	if err := sb.Terminate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range []sandbox.PortMapping{ports[0], m, idle} {
		if _, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", m.HostPort)); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("host port %d after terminate: %v, want ECONNREFUSED", m.HostPort, err)
		}
	}
}

// checkPublishedFlood floods the published port at host (whose server
// answers /marker.txt): the connections over the cap are closed at once,
// the others held; once the flood ends the port serves again.
func checkPublishedFlood(t *testing.T, host string) {
	t.Helper()
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	for range sandbox.MaxPublishedConns {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
	}
	// The cap counts connections being served: wait until the flood's
	// are (each one's first byte through proves it).
	for i, c := range flood {
		fmt.Fprintf(c, "GET /marker.txt HTTP/1.0\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(60 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "HTTP/1.0 200") {
			t.Fatalf("flood connection %d: %q %v", i, line, err)
		}
	}
	// HTTP/1.0 answers end with a close: hold connections open instead.
	for _, c := range flood {
		c.Close()
	}
	flood = nil
	for range sandbox.MaxPublishedConns {
		c, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
	}
	over, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	// Either this one or one of the flood's arrived past the cap; the
	// flood's are served, so unless the server closed one, the extra one
	// is closed without an answer.
	fmt.Fprintf(over, "GET /marker.txt HTTP/1.0\r\n\r\n")
	over.SetReadDeadline(time.Now().Add(60 * time.Second))
	n, err := over.Read(make([]byte, 64))
	over.Close()
	if n != 0 || err == nil {
		t.Errorf("a connection over the cap of %d got %d bytes (%v), want it closed", sandbox.MaxPublishedConns, n, err)
	}
	for _, c := range flood {
		c.Close()
	}
	flood = nil
	if body := getUntil(t, "http://"+host+"/marker.txt"); body != "published\n" {
		t.Errorf("after the flood: %q", body)
	}
}

func TestPublishedPortsRefused(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		what string
		spec sandbox.Spec
	}{
		{"port 0", sandbox.Spec{Networking: sandbox.Networking{Ports: []sandbox.PortMapping{{Port: 0}}}}},
		{"port 70000", sandbox.Spec{Networking: sandbox.Networking{Ports: []sandbox.PortMapping{{Port: 70000}}}}},
		{"bad host ip", sandbox.Spec{Networking: sandbox.Networking{Ports: []sandbox.PortMapping{{HostIP: "localhost", Port: 80}}}}},
		{"same host port twice", sandbox.Spec{Networking: sandbox.Networking{Ports: []sandbox.PortMapping{{HostPort: 18080, Port: 80}, {HostPort: 18080, Port: 81}}}}},
		{"host network", sandbox.Spec{Networking: sandbox.Networking{Network: sandbox.NetworkPolicy{Mode: netpolicy.Host}, Ports: []sandbox.PortMapping{{Port: 80}}}}},
	} {
		if _, err := sandbox.Provision(ctx, tc.spec, sandbox.ProvisionOptions{}); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("%s: %v, want ErrInvalidSpec", tc.what, err)
		}
	}
	cmd := sandbox.Command(ctx, sandbox.Spec{Networking: sandbox.Networking{Ports: []sandbox.PortMapping{{Port: 80}}}}, "true")
	if err := cmd.Run(); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("a one-shot command with ports: %v, want ErrInvalidSpec", err)
	}
}

// TestNetworkReachLeavesNothing: a limited sandbox with a published port,
// after DNS queries, caught and published connections, leaves no
// descriptor or goroutine behind once terminated.
func TestNetworkReachLeavesNothing(t *testing.T) {
	needTools(t, "python3", "getent")
	ctx := context.Background()
	port, _ := hostServers(t)
	cycle := func() {
		sb, err := sandbox.Provision(ctx, transparentSpec(port), sandbox.ProvisionOptions{Resolver: &fakeResolver{}})
		if err != nil {
			t.Fatal(err)
		}
		m, err := sb.Publish(ctx, sandbox.PortMapping{Port: 8000})
		if err != nil {
			t.Fatal(err)
		}
		r, err := sb.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", fmt.Sprintf(
			"getent hosts allowed.test >/dev/null && python3 -c '%s' allowed.test %s && setsid python3 -m http.server 8000 -d /tmp </dev/null >/dev/null 2>&1 &", pyConnect, port)}})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("exec: %v %+v", err, r)
		}
		getUntil(t, fmt.Sprintf("http://127.0.0.1:%d/", m.HostPort))
		if err := sb.Terminate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cycle() // warm up: lazily made state
	fds, goroutines := openFDs(t), runtime.NumGoroutine()
	cycle()
	http.DefaultClient.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for (runtime.NumGoroutine() > goroutines || openFDs(t) > fds) && time.Now().Before(deadline) {
		runtime.GC() // io.Copy's splice pipes wait in a pool until collected
		time.Sleep(10 * time.Millisecond)
	}
	if n := openFDs(t); n > fds {
		ents, _ := os.ReadDir("/proc/self/fd")
		var links []string
		for _, e := range ents {
			l, _ := os.Readlink("/proc/self/fd/" + e.Name())
			links = append(links, e.Name()+"="+l)
		}
		t.Errorf("descriptors: %d before, %d after: %v", fds, n, links)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		buf := make([]byte, 1<<16)
		t.Errorf("goroutines: %d before, %d after\n%s", goroutines, n, buf[:runtime.Stack(buf, true)])
	}
}
