package sandbox

import (
	"fmt"
	"strings"

	"github.com/tent-sandbox/tent/netpolicy"
)

// defaultPath is PATH inside the sandbox unless the spec sets one.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// passedThrough are the caller's variables the clean environment keeps.
var passedThrough = []string{"TERM", "LANG", "TZ"}

// buildEnv computes the command's environment: the clean default (or the
// caller's whole environment with inherit), then the network's variables
// (proxy settings in limited mode: they must replace any inherited
// ones), then layers in order, later entries winning. home and user
// describe the identity inside. No variable of the caller's environment
// or of layers whose value holds one of secrets (the values of the
// spec's secrets) is kept: the variable a secret's value was read from
// stays outside, whatever the environment options say (inside, the
// secret's own variable holds its placeholder, from network).
func buildEnv(inherit bool, network, layers []string, home, user string, environ, secrets []string) []string {
	var base []string
	if inherit {
		base = append(base, environ...)
	} else {
		base = append(base, "PATH="+defaultPath, "HOME="+home, "USER="+user)
		for _, kv := range environ {
			k, _, _ := strings.Cut(kv, "=")
			for _, p := range passedThrough {
				if k == p {
					base = append(base, kv)
				}
			}
		}
	}
	base = withoutSecrets(base, secrets)
	base = append(base, network...)
	return mergeEnv(append(base, withoutSecrets(layers, secrets)...))
}

// withoutSecrets returns kvs less the entries whose value holds one of
// secrets.
func withoutSecrets(kvs, secrets []string) []string {
	if len(secrets) == 0 {
		return kvs
	}
	out := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		_, v, _ := strings.Cut(kv, "=")
		held := false
		for _, s := range secrets {
			held = held || (s != "" && strings.Contains(v, s))
		}
		if !held {
			out = append(out, kv)
		}
	}
	return out
}

// secretValues returns the values of secrets.
func secretValues(secrets []netpolicy.Secret) []string {
	var vs []string
	for _, s := range secrets {
		vs = append(vs, s.Value)
	}
	return vs
}

// proxyEnv points every common proxy variable at the sandbox's proxy
// listeners (its own loopback, bridged to tent's host-side proxy).
func proxyEnv(httpPort, socksPort int) []string {
	httpURL := fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	socksURL := fmt.Sprintf("socks5h://127.0.0.1:%d", socksPort)
	noProxy := "localhost,127.0.0.1,::1"
	var env []string
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy",
		"npm_config_proxy", "npm_config_https_proxy", "YARN_HTTP_PROXY", "YARN_HTTPS_PROXY", "PIP_PROXY"} {
		env = append(env, k+"="+httpURL)
	}
	for _, k := range []string{"ALL_PROXY", "all_proxy"} {
		env = append(env, k+"="+socksURL)
	}
	for _, k := range []string{"NO_PROXY", "no_proxy", "npm_config_noproxy"} {
		env = append(env, k+"="+noProxy)
	}
	// JVMs ignore the variables above.
	env = append(env, fmt.Sprintf("JAVA_TOOL_OPTIONS=-Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort=%d -Dhttps.proxyHost=127.0.0.1 -Dhttps.proxyPort=%d -Dhttp.nonProxyHosts=localhost|127.0.0.1", httpPort, httpPort))
	return env
}

// mergeEnv keeps the last value of each key, at the position of its
// first appearance.
func mergeEnv(kvs []string) []string {
	index := make(map[string]int, len(kvs))
	out := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := index[k]; ok {
			out[i] = kv
			continue
		}
		index[k] = len(out)
		out = append(out, kv)
	}
	return out
}
