//go:build linux

package sandbox_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
)

// hostileSecret is made of characters a header name may hold, and of
// '+' and '~', which a URL escapes or not.
const hostileSecret = "ghp+REAL~secret.value-0123456789"

// TestSecretNotEchoedByHostileOrigin: an origin bound to a secret that
// quotes what it received everywhere it can (the status line's reason, a
// header field's name and value, the body; the Bearer token, a Basic
// credential, the request target with the value in its path and query)
// hands no form of the value to a program in the sandbox, nor to the
// network log.
func TestSecretNotEchoedByHostileOrigin(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		c, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		head := "HTTP/1.1 401 Bad credentials " + auth + "\r\nX-Auth: " + auth + "\r\n"
		if tok, ok := strings.CutPrefix(auth, "Bearer "); ok {
			head += "X-Echo-" + tok + ": 1\r\n"
		}
		body := "target " + r.RequestURI + "\nauth " + auth + "\n"
		fmt.Fprintf(c, "%sContent-Length: %d\r\nConnection: close\r\n\r\n%s", head, len(body), body)
	}))
	srv.StartTLS()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	t.Cleanup(sandbox.SetTestUpstreamRoots(pool))
	spec := sandbox.Spec{
		Networking: sandbox.Networking{
			Network: sandbox.NetworkPolicy{
				Mode:         netpolicy.Limited,
				AllowedHosts: []string{"api.example.com:" + port, "127.0.0.1"},
				Secrets:      []netpolicy.Secret{{Name: "TOKEN", Hosts: []string{"api.example.com"}, Value: hostileSecret, InURL: true}},
			},
		},
	}
	base := "https://api.example.com:" + port
	script := strings.Join([]string{
		`set -e`,
		`echo "env=$TOKEN"`,
		probeTarget + `/testprobe req -dump GET '` + base + `/hostile/$TOKEN?k=$TOKEN' 'Authorization=Bearer $TOKEN'`,
		probeTarget + `/testprobe req -dump GET '` + base + `/basic' "Authorization=Basic $(printf 'user:%s' "$TOKEN" | base64 | tr -d '\n')"`,
	}, "\n")
	cmd := sandbox.Command(context.Background(), withProbe(t, spec), "/bin/sh", "-c", script)
	var out, errOut bytes.Buffer
	audit := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr, cmd.Resolver, cmd.NetLog = &out, &errOut, &fakeResolver{}, audit
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
	}
	got := out.String() + errOut.String()
	var placeholder string
	for _, line := range strings.Split(out.String(), "\n") {
		if v, ok := strings.CutPrefix(line, "env="); ok {
			placeholder = v
		}
	}
	if !strings.HasPrefix(placeholder, "tent_") {
		t.Fatalf("no placeholder:\n%s", got)
	}
	forms := []string{hostileSecret, "ghp%2BREAL~secret.value-0123456789", "ghp%2bREAL~secret.value-0123456789"}
	for off := range 3 { // the base64 of the value wherever it starts
		s := base64.StdEncoding.EncodeToString(append(make([]byte, off), hostileSecret...))
		forms = append(forms, s[(8*off+5)/6:8*(off+len(hostileSecret))/6])
	}
	for _, f := range forms {
		if strings.Contains(strings.ToLower(got), strings.ToLower(f)) {
			t.Errorf("the sandbox received %q:\n%s", f, got)
		}
		if strings.Contains(audit.String(), f) {
			t.Errorf("the network log holds %q:\n%s", f, audit.String())
		}
	}
	basic := base64.StdEncoding.EncodeToString([]byte("user:" + placeholder))
	for _, want := range []string{
		"status 401 Bad credentials Bearer " + placeholder + "\n",
		"X-Auth: Bearer " + placeholder + "\r\n",
		"target /hostile/" + placeholder + "?k=" + placeholder + "\n",
		"status 401 Bad credentials Basic " + basic + "\n",
		"X-Auth: Basic " + basic + "\r\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("want %q in what the sandbox received:\n%s", want, got)
		}
	}
	if !strings.Contains(strings.ToLower(got), strings.ToLower("X-Echo-"+placeholder+": 1")) {
		t.Errorf("want the echoed field named after the placeholder:\n%s", got)
	}
	if !strings.Contains(audit.String(), `"path":"/hostile/`+placeholder+`"`) {
		t.Errorf("the network log's path, want the placeholder's:\n%s", audit.String())
	}
}
