//go:build linux

package sandbox_test

import (
	"context"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
)

// With a store of values (ProvisionOptions.Secrets), the in-process
// sandbox's proxy asks it per request: an inline value is written to it,
// and a write to it rotates the value from the next request on; a
// delete revokes it.
func TestSecretStoreOfLocalSandbox(t *testing.T) {
	o := newSecretOrigin(t)
	store := &netpolicy.SecretMap{}
	sb, err := sandbox.Provision(context.Background(), withProbe(t, secretSpec(o.port)), sandbox.ProvisionOptions{Resolver: &fakeResolver{}, Secrets: store})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(context.Background())
	if v, ok := store.LookupSecret("TOKEN"); !ok || v != sandboxSecret {
		t.Fatalf("the store after Provision: %q %v, want the inline value", v, ok)
	}
	if s := sb.Info().Spec.Network.Secrets; len(s) != 1 || s[0].Value != "" || !strings.HasPrefix(s[0].Placeholder, "tent_") {
		t.Errorf("the sandbox's spec keeps %+v, want the name and placeholder only", s)
	}
	request := func(path string) string {
		t.Helper()
		res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c",
			probeReq("GET", "https://api.example.com:"+o.port+path, "Authorization=Bearer $TOKEN") + `; echo "$TOKEN"`}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: %v %+v", path, err, res)
		}
		return o.got(path)
	}
	if got := request("/first"); !strings.HasSuffix(got, "Bearer "+sandboxSecret) {
		t.Errorf("/first: the origin received %q", got)
	}
	const rotated = "ghp_ROTATED-value-9876543210"
	if err := store.Set("TOKEN", rotated); err != nil {
		t.Fatal(err)
	}
	if got := request("/rotated"); !strings.HasSuffix(got, "Bearer "+rotated) {
		t.Errorf("/rotated: the origin received %q", got)
	}
	store.Delete("TOKEN")
	if got := request("/revoked"); !strings.Contains(got, "Bearer tent_") {
		t.Errorf("/revoked: the origin received %q, want the placeholder", got)
	}
}

// Two sandboxes given one store and a header transform of one name each
// send their own value (a header transform's value is its sandbox's).
func TestSecretHeaderTransformsOwnWithStore(t *testing.T) {
	o := newSecretOrigin(t)
	store := &netpolicy.SecretMap{}
	start := func(v string) *sandbox.Sandbox {
		spec := secretSpec(o.port)
		spec.Network.Secrets = []netpolicy.Secret{{Name: "E2B_RULE_1", Hosts: []string{"api.example.com"}, Header: "Authorization", Value: "Bearer " + v}}
		sb, err := sandbox.Provision(context.Background(), withProbe(t, spec), sandbox.ProvisionOptions{Resolver: &fakeResolver{}, Secrets: store})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Terminate(context.Background()) })
		return sb
	}
	a, b := start("value-of-a-0123456"), start("value-of-b-0123456")
	for _, c := range []struct {
		sb         *sandbox.Sandbox
		path, want string
	}{{a, "/a", "value-of-a-0123456"}, {b, "/b", "value-of-b-0123456"}} {
		res, err := c.sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", probeReq("GET", "https://api.example.com:"+o.port+c.path)}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: %v %+v", c.path, err, res)
		}
		if got := o.got(c.path); !strings.HasSuffix(got, "Bearer "+c.want) {
			t.Errorf("%s: the origin received %q, want %q", c.path, got, c.want)
		}
	}
	if _, ok := store.LookupSecret("E2B_RULE_1"); ok {
		t.Error("a header transform's value went to the shared store")
	}
}
