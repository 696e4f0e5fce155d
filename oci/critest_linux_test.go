package oci_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// registryPort is the registry's, on the loopback of containerd's own
// network namespace (newCRIEnv), where nothing else listens.
const registryPort = 5000

// registry serves images over the registry API (GET and HEAD of
// /v2/NAME/manifests/REF and /v2/NAME/blobs/DIGEST) on ln, for a CRI
// that pulls: pick gives the image for a request's path. A manifest
// asked by another digest is not found; a blob is served from memory
// (image.blobs) or from its file (image.files).
func registry(t *testing.T, ln net.Listener, pick func(path string) image) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if p == "/v2/" || p == "/v2" {
			w.WriteHeader(http.StatusOK)
			return
		}
		im := pick(p)
		var digest, ctype string
		switch {
		case strings.Contains(p, "/manifests/"):
			ref := p[strings.LastIndex(p, "/")+1:]
			digest, ctype = im.manifest, "application/vnd.oci.image.manifest.v1+json"
			if strings.HasPrefix(ref, "sha256:") && ref != digest {
				http.NotFound(w, r)
				return
			}
		case strings.Contains(p, "/blobs/"):
			digest, ctype = p[strings.LastIndex(p, "/")+1:], "application/octet-stream"
		}
		var body io.Reader
		var size int64
		if b, ok := im.blobs[digest]; ok {
			body, size = bytes.NewReader(b), int64(len(b))
		} else if path, ok := im.files[digest]; ok {
			f, err := os.Open(path)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			defer f.Close()
			st, err := f.Stat()
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			body, size = f, st.Size()
		} else {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", ctype)
		w.Header().Set("Docker-Content-Digest", digest)
		w.Header().Set("Content-Length", fmt.Sprint(size))
		if r.Method != http.MethodHead {
			_, _ = io.Copy(w, body)
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// TestCritest runs cri-tools' critest (TENT_CRITEST: a binary built with
// go test -c sigs.k8s.io/cri-tools/cmd/critest) against containerd's
// CRI with the tent runtime handler (TENT_CRITEST_HANDLER: another, such
// as runc, for comparison), and reports the counts. containerd runs in a
// network namespace of the test's (newCRIEnv: host ports through CNI's
// portmap there), critest in it too (its streaming, port forwarding),
// and the images come from a registry on that namespace's loopback
// (built here from busybox). TENT_CRITEST_SKIP and TENT_CRITEST_FOCUS
// are ginkgo's skip and focus.
func TestCritest(t *testing.T) {
	bin := os.Getenv("TENT_CRITEST")
	if bin == "" {
		t.Skip("TENT_CRITEST (a critest binary) is not set")
	}
	bb, err := exec.LookPath("busybox")
	need(t, err == nil, "busybox missing")
	img := newImage(t, bb, []string{"sh"})
	web := newImage(t, bb, []string{"httpd", "-f", "-p", "80", "-h", "/"})
	addr := fmt.Sprintf("127.0.0.1:%d", registryPort)
	mirrors := ""
	for _, host := range []string{"gcr.io", "registry.k8s.io", "docker.io"} {
		mirrors += fmt.Sprintf("  [plugins.\"io.containerd.grpc.v1.cri\".registry.mirrors.%q]\n    endpoint = [\"http://%s\"]\n", host, addr)
	}
	e := newCRIEnv(t, "[plugins.\"io.containerd.grpc.v1.cri\".registry]\n"+mirrors)
	var ln net.Listener
	if err := inNetns(e.netnsPID, func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	registry(t, ln, func(path string) image {
		// Any name gets img, a name with "nginx" web.
		if strings.Contains(path, "nginx") {
			return web
		}
		return img
	})
	report := filepath.Join(e.dir, "critest.json")
	handler := "tent"
	if h := os.Getenv("TENT_CRITEST_HANDLER"); h != "" {
		handler = h // "runc": the same suite with Debian's runc, for comparison
	}
	args := []string{"-runtime-endpoint", "unix://" + e.sock, "-image-endpoint", "unix://" + e.sock, "-runtime-handler", handler,
		"-ginkgo.no-color", "-ginkgo.json-report", report, "-ginkgo.timeout", "20m"}
	if skip := os.Getenv("TENT_CRITEST_SKIP"); skip != "" {
		args = append(args, "-ginkgo.skip", skip)
	}
	if focus := os.Getenv("TENT_CRITEST_FOCUS"); focus != "" {
		args = append(args, "-ginkgo.focus", focus)
	}
	cmd := exec.Command("nsenter", append([]string{"--net=/proc/" + fmt.Sprint(e.netnsPID) + "/ns/net", "--", bin}, args...)...)
	cmd.Dir = e.dir
	out, _ := cmd.CombinedOutput()
	if err := os.WriteFile(filepath.Join(os.TempDir(), "tent-critest.log"), out, 0o600); err != nil {
		t.Log(err)
	}
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("no critest report: %v\n%s", err, tail(out, 3000))
	}
	var suites []struct {
		SpecReports []struct {
			ContainerHierarchyTexts []string
			LeafNodeText            string
			State                   string
			Failure                 struct{ Message string }
		}
	}
	if err := json.Unmarshal(data, &suites); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	var lines []string
	for _, s := range suites {
		for _, r := range s.SpecReports {
			if r.LeafNodeText == "" {
				continue // suite set-up nodes
			}
			counts[r.State]++
			name := strings.Join(append(r.ContainerHierarchyTexts, r.LeafNodeText), " ")
			msg := r.Failure.Message
			if i := strings.IndexByte(msg, '\n'); i > 0 {
				msg = msg[:i]
			}
			if len(msg) > 200 {
				msg = msg[:200]
			}
			lines = append(lines, fmt.Sprintf("%-8s %s  %s", r.State, name, msg))
		}
	}
	sort.Strings(lines)
	summary := fmt.Sprintf("critest: %v\n%s\n", counts, strings.Join(lines, "\n"))
	_ = os.WriteFile(filepath.Join(os.TempDir(), "tent-critest-summary-"+handler+".txt"), []byte(summary), 0o600)
	t.Log(summary)
}
