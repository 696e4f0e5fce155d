package serve

// The JSON shapes of E2B's control-plane API, as the official SDKs send
// and parse them (field names are the interface). Optional request
// fields are pointers so that "absent" and "zero" differ.

// apiError is E2B's error body: {"code": 404, "message": "..."}.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// newSandboxRequest is the body of POST /v2/sandboxes (NewSandboxV2) and
// POST /sandboxes (NewSandbox).
type newSandboxRequest struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout,omitempty"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	EnvVars             map[string]string `json:"envVars,omitempty"`
	AllowInternetAccess *bool             `json:"allow_internet_access,omitempty"`
	Network             *networkConfig    `json:"network,omitempty"`
	AutoPause           *bool             `json:"autoPause,omitempty"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory,omitempty"`
	AutoResume          *autoResume       `json:"autoResume,omitempty"`
	Secure              *bool             `json:"secure,omitempty"`
	VolumeMounts        []volumeMount     `json:"volumeMounts,omitempty"`
	// Not served: each is refused with a clear error when set.
	MCP any `json:"mcp,omitempty"`
	IAM any `json:"iam,omitempty"`
}

// autoResume is SandboxAutoResumeConfig.
type autoResume struct {
	Enabled bool `json:"enabled"`
}

// networkConfig is SandboxNetworkConfig (at creation) and
// SandboxNetworkUpdateConfig (PUT .../network, which adds
// allow_internet_access).
type networkConfig struct {
	AllowOut            []string `json:"allowOut,omitempty"`
	DenyOut             []string `json:"denyOut,omitempty"`
	AllowInternetAccess *bool    `json:"allow_internet_access,omitempty"`
	// Traffic into the sandbox's ports (see ports.go); httpsPorts is
	// accepted and has no effect.
	AllowPublicTraffic *bool   `json:"allowPublicTraffic,omitempty"`
	MaskRequestHost    *string `json:"maskRequestHost,omitempty"`
	HTTPSPorts         []int   `json:"httpsPorts,omitempty"`
	// Rules are E2B's request transforms by host; header transforms are
	// served (see ruleSecrets).
	Rules map[string][]networkRule `json:"rules,omitempty"`
	// Not served: refused when set.
	EgressProxy any `json:"egressProxy,omitempty"`
}

// networkRule is one entry of network.rules[HOST].
type networkRule struct {
	Transform *ruleTransform `json:"transform,omitempty"`
}

// ruleTransform is what a rule changes in the requests to its host.
type ruleTransform struct {
	Headers map[string]string `json:"headers,omitempty"`
}

// sandboxResponse is Sandbox: what create, connect, resume and fork return.
type sandboxResponse struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
	// Not E2B's: the network a create gave the sandbox (its template's
	// when the request left it open), as getInfo reports it.
	AllowInternetAccess *bool          `json:"allowInternetAccess,omitempty"`
	Network             *networkConfig `json:"network,omitempty"`
}

// listedSandbox is ListedSandbox (GET /v2/sandboxes, GET /sandboxes).
type listedSandbox struct {
	SandboxID   string            `json:"sandboxID"`
	TemplateID  string            `json:"templateID"`
	Alias       string            `json:"alias,omitempty"`
	ClientID    string            `json:"clientID"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int64             `json:"memoryMB"`
	DiskSizeMB  int64             `json:"diskSizeMB"`
	StartedAt   string            `json:"startedAt"`
	EndAt       string            `json:"endAt"`
	State       string            `json:"state"`
	EnvdVersion string            `json:"envdVersion"`
	Metadata    map[string]string `json:"metadata"`
	// VolumeMounts are the volumes the sandbox mounts, by name.
	VolumeMounts []volumeMount `json:"volumeMounts,omitempty"`
}

// sandboxDetail is SandboxDetail (GET /sandboxes/{id}).
type sandboxDetail struct {
	listedSandbox
	EnvdAccessToken     string         `json:"envdAccessToken,omitempty"`
	Domain              *string        `json:"domain"`
	AllowInternetAccess *bool          `json:"allowInternetAccess"`
	Network             *networkConfig `json:"network,omitempty"`
	Lifecycle           lifecycle      `json:"lifecycle"`
}

// lifecycle is SandboxLifecycle.
type lifecycle struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

// timeoutRequest is SandboxTimeoutRequest (POST .../timeout).
type timeoutRequest struct {
	Timeout *int64 `json:"timeout"`
}

// connectRequest is ConnectSandboxV2 (POST /v2/sandboxes/{id}/connect)
// and ResumedSandbox (POST /sandboxes/{id}/resume).
type connectRequest struct {
	Timeout   *int64 `json:"timeout,omitempty"`
	Memory    *bool  `json:"memory,omitempty"`
	AutoPause *bool  `json:"autoPause,omitempty"`
}

// pauseRequest is SandboxPauseRequest.
type pauseRequest struct {
	Memory *bool `json:"memory,omitempty"`
}

// snapshotRequest is SandboxSnapshotRequest.
type snapshotRequest struct {
	Name string `json:"name,omitempty"`
}

// snapshotInfo is SnapshotInfo.
type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

// forkRequest is SandboxForkRequest.
type forkRequest struct {
	Count   *int   `json:"count,omitempty"`
	Timeout *int64 `json:"timeout,omitempty"`
}

// forkResult is SandboxForkResult: exactly one of the two is set.
type forkResult struct {
	Sandbox *sandboxResponse `json:"sandbox,omitempty"`
	Error   *apiError        `json:"error,omitempty"`
}

// sandboxMetric is SandboxMetric.
type sandboxMetric struct {
	Timestamp     string  `json:"timestamp"`
	TimestampUnix int64   `json:"timestampUnix"`
	CPUCount      int     `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	MemUsed       int64   `json:"memUsed"`
	MemTotal      int64   `json:"memTotal"`
	MemCache      int64   `json:"memCache"`
	DiskUsed      int64   `json:"diskUsed"`
	DiskTotal     int64   `json:"diskTotal"`
}

// sandboxesWithMetrics is SandboxesWithMetrics (GET /sandboxes/metrics).
type sandboxesWithMetrics struct {
	Sandboxes map[string]sandboxMetric `json:"sandboxes"`
}
