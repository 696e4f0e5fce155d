package policy

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/tent-sandbox/tent/netpolicy"
)

// Secret is one entry of a policy's secrets: a credential the sandbox
// uses through a placeholder (see netpolicy.Secret). The value is never
// written in the policy: it comes from the caller's environment variable
// Env (Name by default) or from the file File (its content, one trailing
// newline dropped), and the backend writes it to its secret store when
// the sandbox is made.
//
//	secrets:
//	  - name: GITHUB_TOKEN
//	    hosts: [api.github.com, github.com]
//	  - name: MODEL_KEY
//	    hosts: [api.example.com]
//	    file: model-key.txt          # or env: OTHER_VARIABLE
//	    in_url: false
type Secret struct {
	Name  string   `json:"name" yaml:"name"`
	Hosts []string `json:"hosts" yaml:"hosts"`
	Env   string   `json:"env,omitempty" yaml:"env,omitempty"`
	File  string   `json:"file,omitempty" yaml:"file,omitempty"`
	InURL bool     `json:"in_url,omitempty" yaml:"in_url,omitempty"`
}

// maxSecretFile bounds a file a secret's value is read from.
const maxSecretFile = 64 << 10

// ParseSecretFlag parses a --secret value, NAME@HOST[,HOST...], and takes
// the value from values (a --secret-file's NAME=VALUE lines) or, when it
// has none, from the caller's environment variable NAME. A value on the
// command line (NAME=VALUE@...) is refused: argv is public.
func ParseSecretFlag(s string, values map[string]string, getenv func(string) (string, bool)) (netpolicy.Secret, error) {
	name, hosts, ok := strings.Cut(s, "@")
	if strings.Contains(name, "=") {
		return netpolicy.Secret{}, errors.New("a value on the command line would be visible to every user of this host (ps, /proc): export the variable NAME and write --secret NAME@HOST, or use --secret-file")
	}
	if !ok || hosts == "" {
		return netpolicy.Secret{}, errors.New("want NAME@HOST[,HOST...]: the variable and the hosts its value may be sent to")
	}
	if !ValidEnvName(name) {
		return netpolicy.Secret{}, fmt.Errorf("%q is not a variable name", name)
	}
	v, ok := values[name]
	if !ok {
		v, ok = getenv(name)
	}
	if !ok || v == "" {
		return netpolicy.Secret{}, fmt.Errorf("%s is set neither in tent's environment nor in a --secret-file", name)
	}
	return netpolicy.Secret{Name: name, Hosts: strings.Split(hosts, ","), Value: v}, nil
}

// ReadSecretFile reads a --secret-file: NAME=VALUE lines as an env file
// has them (see ParseEnvFile), which must not be readable by others.
func ReadSecretFile(path string) (map[string]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s is readable or writable by other users (mode %04o): chmod 600 it", path, fi.Mode().Perm())
	}
	kvs, err := ReadEnvFile(path)
	if err != nil {
		return nil, err
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m, nil
}

// applySecrets appends the policy's secrets to secrets, reading their
// values.
func (p *Policy) applySecrets(secrets *[]netpolicy.Secret, getenv func(string) (string, bool)) error {
	for i, s := range p.Secrets {
		where := fmt.Sprintf("secrets[%d]", i)
		if !ValidEnvName(s.Name) {
			return policyErr(where, s.Name, errors.New("name: not a variable name"))
		}
		where += " (" + s.Name + ")"
		var v string
		switch {
		case s.Env != "" && s.File != "":
			return policyErr(where, "", errors.New("give env or file, not both"))
		case s.File != "":
			path, err := p.path(s.File)
			if err != nil {
				return policyErr(where, s.File, err)
			}
			b, err := readSmallFile(path)
			if err != nil {
				return policyErr(where, "", err)
			}
			v = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		default:
			env := s.Env
			if env == "" {
				env = s.Name
			}
			var ok bool
			if getenv != nil { // nil: no environment to read (a template of tent serve or tent mcp)
				v, ok = getenv(env)
			}
			if !ok || v == "" {
				return policyErr(where, "", fmt.Errorf("the variable %s is not set in tent's environment (a template cannot read it: give file)", env))
			}
		}
		*secrets = append(*secrets, netpolicy.Secret{Name: s.Name, Hosts: s.Hosts, InURL: s.InURL, Value: v})
	}
	return nil
}

func readSmallFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, maxSecretFile+1)
	n, err := f.Read(b)
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", path, err)
	}
	if n > maxSecretFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxSecretFile)
	}
	return b[:n], nil
}
