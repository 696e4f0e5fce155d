package sandbox

import "strings"

// DefaultPath is PATH inside the sandbox unless the spec sets one.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// passedThrough are the caller's variables the clean environment keeps.
var passedThrough = []string{"TERM", "LANG", "TZ"}

// buildEnv computes the command's environment: the clean default (or the
// caller's whole environment with inherit), then layers in order, later
// entries winning. home and user describe the identity inside.
func buildEnv(inherit bool, layers []string, home, user string, environ []string) []string {
	var base []string
	if inherit {
		base = append(base, environ...)
	} else {
		base = append(base, "PATH="+DefaultPath, "HOME="+home, "USER="+user)
		for _, kv := range environ {
			k, _, _ := strings.Cut(kv, "=")
			for _, p := range passedThrough {
				if k == p {
					base = append(base, kv)
				}
			}
		}
	}
	return mergeEnv(append(base, layers...))
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
