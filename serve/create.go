package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

// labelTemplate is the label that keeps a sandbox's template (so that
// `tent ls` shows it and a restarted server reports it); metadata keys
// starting with labelPrefix are reserved.
const (
	labelPrefix   = "tent."
	labelTemplate = labelPrefix + "template"
)

// Bounds on a create request's maps.
const (
	maxMetadata     = 64
	maxMetadataKey  = 128
	maxMetadataVal  = 1024
	maxEnvVars      = 256
	maxEnvValueSize = 128 << 10
)

// decodeJSON decodes one JSON value from b into v. An empty body leaves
// v alone; trailing data is an error. Errors are 400s saying where.
func decodeJSON(b []byte, v any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("unexpected data after the JSON value")
	}
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("unexpected data after the JSON value")
		}
	}
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return errorf(http.StatusBadRequest, "invalid request body: %s: cannot use a JSON %s as %s", te.Field, te.Value, te.Type)
	}
	return errorf(http.StatusBadRequest, "invalid request body: %v", err)
}

// createPlan is a validated create request.
type createPlan struct {
	template      string
	timeout       time.Duration
	env           []string // KEY=VALUE, sorted by key
	metadata      map[string]string
	allowInternet *bool
	network       *networkConfig
	ports         *portSettings
	onTimeout     string
	pauseFiles    bool // onTimeout pause keeps only the files (autoPauseMemory: false)
	autoResume    bool
	volumes       []volumeMount
}

// planCreate validates a create request. It reads nothing but the
// request, so that it can be fuzzed; the template is resolved later.
func (s *Server) planCreate(req newSandboxRequest, caps sandbox.Capabilities) (createPlan, error) {
	p := createPlan{template: req.TemplateID, onTimeout: onTimeoutKill}
	if decidesNetwork(req.AllowInternetAccess, req.Network) {
		// Otherwise the template decides, and getInfo reports what it
		// gave rather than E2B's defaults.
		p.allowInternet, p.network = req.AllowInternetAccess, req.Network
	}
	p.ports = portSettingsOf(req.Network)
	if p.ports != nil && !validMaskHost(p.ports.MaskHost) {
		return p, errorf(http.StatusBadRequest, "network.maskRequestHost %q: want a host name or address with an optional port, ${PORT} standing for the sandbox port", p.ports.MaskHost)
	}
	if p.template == "" {
		p.template = baseTemplate
	}
	if !policy.ValidName(p.template) {
		return p, errorf(http.StatusBadRequest, "templateID %q: %v", req.TemplateID, policy.ErrTemplateName)
	}
	var err error
	if p.timeout, err = s.timeout(req.Timeout, "timeout", 1); err != nil {
		return p, err
	}
	switch {
	case req.MCP != nil:
		return p, notImplemented("mcp (the MCP gateway)")
	case req.IAM != nil:
		return p, notImplemented("iam (workload identity tokens)")
	}
	if len(req.VolumeMounts) > 0 && s.vols.dir == "" {
		return p, notImplemented("volumeMounts (this server has no volumes directory)")
	}
	if err := checkVolumeMounts(req.VolumeMounts); err != nil {
		return p, err
	}
	p.volumes = req.VolumeMounts
	if p.metadata, err = checkMetadata(req.Metadata); err != nil {
		return p, err
	}
	if p.env, err = checkEnv(req.EnvVars); err != nil {
		return p, err
	}
	if req.AutoPause != nil && *req.AutoPause {
		// autoPauseMemory (only read with autoPause, as by E2B): false
		// keeps only the files (see pauseFiles).
		if req.AutoPauseMemory != nil && !*req.AutoPauseMemory {
			if !caps.Snapshot || !caps.Resume {
				return p, errorf(http.StatusBadRequest, "autoPauseMemory: false: a filesystem-only pause needs snapshots and resume, which this backend does not offer")
			}
			p.pauseFiles = true
		} else if !caps.Suspend {
			return p, errorf(http.StatusBadRequest, "autoPause: pausing freezes the sandbox with the cgroup freezer, which this host does not give sandboxes (%s cgroups)", caps.CgroupVersion)
		}
		p.onTimeout = onTimeoutPause
	}
	if req.AutoResume != nil && req.AutoResume.Enabled {
		if p.onTimeout != onTimeoutPause {
			return p, errorf(http.StatusBadRequest, "autoResume needs autoPause: true")
		}
		if p.pauseFiles {
			return p, errorf(http.StatusBadRequest, "autoResume with autoPauseMemory: false: a filesystem-only pause is resumed by connect only, as by E2B")
		}
		p.autoResume = true
	}
	// The network settings are mapped against the template later; check
	// them now against the most permissive template (net: host), so that
	// a bad request never provisions.
	if _, err := networkPolicy(sandbox.NetworkPolicy{Mode: policy.NetHost}, req.AllowInternetAccess, req.Network, false, caps.NetworkPolicy); err != nil {
		return p, err
	}
	return p, nil
}

// timeout validates a timeout in seconds: absent is the default, else
// minSec to MaxTimeout.
func (s *Server) timeout(sec *int64, field string, minSec int64) (time.Duration, error) {
	if sec == nil {
		return s.opts.DefaultTimeout, nil
	}
	maxSec := int64(s.opts.MaxTimeout / time.Second)
	if *sec < minSec || *sec > maxSec {
		return 0, errorf(http.StatusBadRequest, "%s: %d seconds is outside %d to %d", field, *sec, minSec, maxSec)
	}
	return time.Duration(*sec) * time.Second, nil
}

// checkMetadata validates metadata, which becomes the sandbox's labels:
// bounded, valid UTF-8 without control characters (`tent ls` prints
// them), keys not in tent's reserved namespace.
func checkMetadata(md map[string]string) (map[string]string, error) {
	if len(md) > maxMetadata {
		return nil, errorf(http.StatusBadRequest, "metadata: %d entries, at most %d", len(md), maxMetadata)
	}
	for k, v := range md {
		switch {
		case k == "" || len(k) > maxMetadataKey:
			return nil, errorf(http.StatusBadRequest, "metadata key %q: 1 to %d bytes", k, maxMetadataKey)
		case len(v) > maxMetadataVal:
			return nil, errorf(http.StatusBadRequest, "metadata %q: value over %d bytes", k, maxMetadataVal)
		case !printable(k) || !printable(v):
			return nil, errorf(http.StatusBadRequest, "metadata %q: keys and values must be UTF-8 text without control characters", k)
		case strings.HasPrefix(k, labelPrefix):
			return nil, errorf(http.StatusBadRequest, "metadata key %q: keys starting with %q are reserved by tent", k, labelPrefix)
		}
	}
	return md, nil
}

// printable reports whether s is valid UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 {
			return false
		}
	}
	return true
}

// checkEnv validates envVars and returns them as KEY=VALUE entries in
// key order.
func checkEnv(env map[string]string) ([]string, error) {
	if len(env) > maxEnvVars {
		return nil, errorf(http.StatusBadRequest, "envVars: %d entries, at most %d", len(env), maxEnvVars)
	}
	keys := slices.Sorted(maps.Keys(env))
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		v := env[k]
		switch {
		case !policy.ValidEnvName(k):
			return nil, errorf(http.StatusBadRequest, "envVars: %q is not a valid variable name (letters, digits and '_', not starting with a digit)", k)
		case len(v) > maxEnvValueSize:
			return nil, errorf(http.StatusBadRequest, "envVars %s: value over %d bytes", k, maxEnvValueSize)
		case strings.IndexByte(v, 0) >= 0:
			return nil, errorf(http.StatusBadRequest, "envVars %s: the value contains a NUL byte", k)
		}
		out = append(out, k+"="+v)
	}
	return out, nil
}

// labels are the sandbox's labels: its metadata and its template.
func (p createPlan) labels() map[string]string {
	l := make(map[string]string, len(p.metadata)+1)
	maps.Copy(l, p.metadata)
	l[labelTemplate] = p.template
	return l
}

// metadataOf is a sandbox's E2B metadata: its labels without tent's.
func metadataOf(labels map[string]string) map[string]string {
	md := make(map[string]string, len(labels))
	for k, v := range labels {
		if !strings.HasPrefix(k, labelPrefix) {
			md[k] = v
		}
	}
	return md
}

// templateOf is the template a sandbox was created from, as its label
// keeps it ("" for a sandbox the server did not create).
func templateOf(info sandbox.Info) string { return info.Spec.Labels[labelTemplate] }
