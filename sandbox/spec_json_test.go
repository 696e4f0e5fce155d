package sandbox_test

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/seccomp"
)

// flatSpec is the Spec of testdata/spec-flat.json: every field set.
func flatSpec() sandbox.Spec {
	errno := uint(1)
	return sandbox.Spec{
		Name:   "web",
		Labels: map[string]string{"team": "infra"},
		Filesystem: sandbox.Filesystem{
			Mounts:        []sandbox.Mount{{Source: "/src", Target: "/work", Access: sandbox.CopyOnWrite}, {Source: "/data", Target: "/data", Access: sandbox.ReadOnly}},
			Root:          &sandbox.Root{Path: "/bundle/rootfs", ReadOnly: true, MakeMountPoints: true},
			Tmpfs:         []string{"/scratch"},
			WritableRoot:  true,
			MaskedPaths:   []string{"/proc/kcore"},
			ReadOnlyPaths: []string{"/proc/sys"},
			GitWritable:   true,
		},
		Identity: sandbox.Identity{
			User:       &sandbox.User{UID: 1000, GID: 1000, Name: "agent"},
			Hostname:   "box",
			Workdir:    "/work",
			Env:        []string{"A=1", "B=2"},
			EnvInherit: true,
			Sudo:       true,
		},
		Networking: sandbox.Networking{
			Network: sandbox.NetworkPolicy{
				Mode:         netpolicy.Limited,
				AllowedHosts: []string{"example.com", "*.github.com:443"},
				DeniedHosts:  []string{"evil.example.com"},
				Secrets:      []netpolicy.Secret{{Name: "GITHUB_TOKEN", Hosts: []string{"api.github.com"}, Header: "Authorization", Template: "Bearer {}"}},
			},
			Ports: []sandbox.PortMapping{{HostIP: "127.0.0.1", HostPort: 8080, Port: 3000}},
		},
		Limits:     sandbox.Limits{Memory: 1 << 30, Pids: 256, CPUs: 1.5, Timeout: 90 * time.Second, NoFile: 4096},
		Seccomp:    sandbox.Seccomp{Unconfined: true, Profile: &seccomp.Profile{DefaultAction: "SCMP_ACT_ERRNO", DefaultErrnoRet: &errno, Syscalls: []seccomp.Syscall{{Names: []string{"read", "write"}, Action: "SCMP_ACT_ALLOW"}}}},
		Sysctls:    map[string]string{"net.ipv4.ping_group_range": "0 2147483647"},
		Tier:       sandbox.TierReduced,
		BestEffort: true,
	}
}

// A Spec's JSON keeps the flat shape tent wrote before Spec was grouped
// (testdata/spec-flat.json was written by tent at c256ceb, every field
// set): state records, snapshot manifests and tent-server's state hold
// it. That JSON decodes, every key known, to the same Spec; a Spec
// encodes to the same keys and values (an older tent reads it); and the
// new JSON round-trips.
func TestSpecJSONKeepsTheFlatShape(t *testing.T) {
	old, err := os.ReadFile("testdata/spec-flat.json")
	if err != nil {
		t.Fatal(err)
	}
	want := flatSpec()
	var got sandbox.Spec
	d := json.NewDecoder(bytes.NewReader(old))
	d.DisallowUnknownFields()
	if err := d.Decode(&got); err != nil {
		t.Fatalf("the flat JSON of an older tent: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the flat JSON decodes to\n%+v\nwant\n%+v", got, want)
	}

	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var shape, oldShape map[string]any
	if err := json.Unmarshal(b, &shape); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(old, &oldShape); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(shape, oldShape) {
		t.Errorf("a Spec encodes to\n%s\nwhich is not the flat JSON of\n%s", b, old)
	}

	var back sandbox.Spec
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, want) {
		t.Errorf("round trip: %+v, %v; want %+v", back, err, want)
	}
}
