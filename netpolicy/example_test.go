package netpolicy_test

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"

	"github.com/tent-sandbox/tent/netpolicy"
)

func ExampleParseRule() {
	for _, s := range []string{"API.Example.com.:443", "*.example.com", "[2001:db8::/32]:443", "*.co.uk", "https://example.com"} {
		r, err := netpolicy.ParseRule(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(r)
	}
	// Output:
	// api.example.com:443
	// *.example.com
	// [2001:db8::/32]:443
	// invalid host pattern "*.co.uk": *.co.uk would match every name under the public suffix "co.uk": name the domains you need
	// invalid host pattern "https://example.com": a URL scheme is not allowed: give the host alone, as in example.com or example.com:443
}

func ExampleCompiled_CheckName() {
	c, err := netpolicy.Compile(netpolicy.Policy{
		Mode:         netpolicy.Limited,
		AllowedHosts: []string{"*.example.com", "10.0.0.0/8:5432"},
		DeniedHosts:  []string{"admin.example.com"},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(c.CheckName("api.example.com", 443))
	fmt.Println(c.CheckName("example.com", 443))
	fmt.Println(c.CheckName("admin.example.com", 443))
	fmt.Println(c.CheckAddr(netip.MustParseAddr("127.0.0.1"), 443))
	fmt.Println(c.CheckAddr(netip.MustParseAddr("10.1.2.3"), 5432))
	// Output:
	// allow (allowed by rule *.example.com)
	// deny (not allowed)
	// deny (denied by rule admin.example.com)
	// deny (private address)
	// allow (allowed by rule 10.0.0.0/8:5432)
}

// A proxy serves listeners it is given; in tent they are sockets created
// inside the sandbox's network namespace.
func ExampleProxy() {
	policy, err := netpolicy.Compile(netpolicy.Policy{Mode: netpolicy.Limited, AllowedHosts: []string{"proxy.golang.org"}})
	if err != nil {
		panic(err)
	}
	p := netpolicy.NewProxy(netpolicy.ProxyConfig{
		Policy:    policy,
		SandboxID: "a1b2c3",
		Audit:     os.Stderr,
		Logger:    slog.Default(),
	})
	httpL, _ := net.Listen("tcp", "127.0.0.1:0")
	socksL, _ := net.Listen("tcp", "127.0.0.1:0")
	go p.ServeHTTP(httpL)
	go p.ServeSOCKS5(socksL)
	// ... run the sandbox ...
	p.Close()
	if s := netpolicy.Summary(p.Denied()); s != "" {
		fmt.Fprintln(os.Stderr, "tent:", s)
	}
}

func ExampleParseHTTPRule() {
	for _, s := range []string{"get,HEAD api.github.com/repos/my-org/", "api.example.com/v1/../v2/", "api.example.com"} {
		r, isHTTP, err := netpolicy.ParseHTTPRule(s)
		switch {
		case err != nil:
			fmt.Println(err)
		case !isHTTP:
			fmt.Println(s, "is a plain host rule")
		default:
			fmt.Println(r)
		}
	}
	// Output:
	// GET,HEAD api.github.com/repos/my-org/
	// api.example.com/v2/
	// api.example.com is a plain host rule
}

func ExampleNormalizePath() {
	for _, p := range []string{"/repos/org/./a//b", "/repos/%6Frg/%2e%2e/other", "/repos/org%2F..%2Fother", "/../etc"} {
		np, ok := netpolicy.NormalizePath(p)
		fmt.Printf("%s -> %q %v\n", p, np, ok)
	}
	// Output:
	// /repos/org/./a//b -> "/repos/org/a/b" true
	// /repos/%6Frg/%2e%2e/other -> "/repos/other" true
	// /repos/org%2F..%2Fother -> "" false
	// /../etc -> "" false
}

// A policy with a secret and an HTTP rule: which hosts the proxy
// intercepts, and what it decides on requests there.
func ExampleCompiled_CheckRequest() {
	c, err := netpolicy.Compile(netpolicy.Policy{
		Mode:         netpolicy.Limited,
		AllowedHosts: []string{"GET,HEAD api.github.com/repos/my-org/", "pypi.org"},
		Secrets:      []netpolicy.Secret{{Name: "GITHUB_TOKEN", Hosts: []string{"api.github.com"}, Value: "ghp_example-not-a-real-token"}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c.Intercepts("api.github.com", 443), c.Intercepts("pypi.org", 443))
	fmt.Println(c.CheckRequest("api.github.com", 443, "GET", "/repos/my-org/tent"))
	fmt.Println(c.CheckRequest("api.github.com", 443, "DELETE", "/repos/my-org/tent"))
	fmt.Println(c.Secrets()[0]) // a secret prints its name and hosts, never its value
	// Output:
	// true false
	// allow (allowed by rule GET,HEAD api.github.com/repos/my-org/)
	// deny (method or path not allowed GET,HEAD api.github.com/repos/my-org/)
	// secret GITHUB_TOKEN for api.github.com
}
