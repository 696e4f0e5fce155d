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
