package netpolicy

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// A secret without a value is a name: its value comes from the proxy's
// SecretSource when a request goes out. Its placeholder is kept in JSON
// (no secret: a sandbox resumed or forked from a record sees the same
// one); its value never.
func TestSecretNamedWithoutValue(t *testing.T) {
	c, err := Compile(Policy{Mode: Limited, Secrets: []Secret{{Name: "X", Hosts: []string{"a.example"}, Value: "inline-value-0123", Placeholder: testPlaceholder}}})
	if err != nil {
		t.Fatal(err)
	}
	j, err := json.Marshal(c.Policy())
	if err != nil || strings.Contains(string(j), "inline-value") || !strings.Contains(string(j), `"placeholder":"`+testPlaceholder+`"`) {
		t.Errorf("in JSON: %s %v", j, err)
	}
	if _, err := Compile(Policy{Mode: Limited, Secrets: []Secret{{Name: "X", Hosts: []string{"a.example"}}}}); err != nil {
		t.Errorf("a secret named without a value: %v", err)
	}
}

// A proxy asks its SecretSource when each request goes out: a value
// written to the source is the next request's, and the answer is
// scrubbed of it; a name the source no longer has is revoked (the
// placeholder goes out as sent, a header transform's field is not set).
func TestSecretSourceRotationAndRevocation(t *testing.T) {
	src := &SecretMap{}
	o, h, c, url := sourcedProxy(t, []Secret{
		{Name: "TOKEN", Hosts: []string{"api.example.com"}, Placeholder: testPlaceholder},
		{Name: "KEY", Hosts: []string{"api.example.com"}, Header: "X-Api-Key"},
	}, src)
	for i, v := range []string{"first-value-0123", "second-value-4567"} {
		if err := src.Set("TOKEN", v); err != nil {
			t.Fatal(err)
		}
		if err := src.Set("KEY", "key-"+v); err != nil {
			t.Fatal(err)
		}
		resp, body := get(t, c, url, "Authorization", "Bearer "+testPlaceholder)
		if got := o.last(t); got.Auth != "Bearer "+v || got.APIKey != "key-"+v {
			t.Errorf("request %d: the origin received %+v, want the value %q", i, got, v)
		}
		if want := "you sent Bearer " + testPlaceholder; body != want || resp.Header.Get("X-Echo") != "Bearer "+testPlaceholder {
			t.Errorf("request %d: answer %q (X-Echo %q), want the value scrubbed: %q", i, body, resp.Header.Get("X-Echo"), want)
		}
	}
	src.Delete("TOKEN")
	src.Delete("KEY")
	get(t, c, url, "Authorization", "Bearer "+testPlaceholder)
	if got := o.last(t); got.Auth != "Bearer "+testPlaceholder || got.APIKey != "" {
		t.Errorf("after the revocation the origin received %+v, want the placeholder and no X-Api-Key", got)
	}
	h.audit.mu.Lock()
	a := h.audit.b.String()
	h.audit.mu.Unlock()
	if strings.Contains(a, "first-value") || strings.Contains(a, "second-value") || !strings.Contains(a, `"placeholders_kept":["TOKEN (revoked: no value)"]`) {
		t.Errorf("the audit log holds a value, or no record of the kept placeholder:\n%s", a)
	}
}

// sourcedProxy starts a proxy that intercepts for secrets and asks src
// for their values, in front of a TLS origin that records what it
// receives; it returns the origin, the harness, a client trusting the
// proxy's CA, and the origin's /echo URL as api.example.com.
func sourcedProxy(t *testing.T, secrets []Secret, src SecretSource) (*recOrigin, *harness, *http.Client, string) {
	t.Helper()
	upCA, err := NewCA("upstream")
	if err != nil {
		t.Fatal(err)
	}
	o := newRecOrigin(t, upCA)
	ca, err := NewCA("sbx-test")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	pol, err := Compile(Policy{Mode: Limited, AllowedHosts: []string{"api.example.com", "127.0.0.1"}, Secrets: secrets})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarnessWith(t, nil, nil, func(c *ProxyConfig) {
		c.Policy, c.CA, c.UpstreamRoots, c.Secrets = pol, ca, o.roots, src
	})
	h.res.set("api.example.com", "127.0.0.1")
	c := h.client(&http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}})
	return o, h, c, fmt.Sprintf("https://api.example.com:%d/echo", o.port)
}
