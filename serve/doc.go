// Package serve is tent serve: E2B's HTTP API over a [sandbox.Backend],
// so that the official, unmodified E2B SDKs (TypeScript, Python) create
// and use tent sandboxes. Point them at the server with
//
//	E2B_API_URL=http://127.0.0.1:49982
//	E2B_SANDBOX_URL=http://127.0.0.1:49982
//	E2B_API_KEY=<the server's key>
//
// # Two APIs on one listener
//
// The control plane (what the SDKs reach at E2B_API_URL: create, list,
// kill, timeouts, pause, snapshots...) is served here, with E2B's paths,
// JSON fields and statuses. The in-sandbox API (what they reach at
// E2B_SANDBOX_URL: commands, PTYs, files) is served by a [SandboxAPI],
// by default package serve/envd's; a request goes there when it carries
// the E2b-Sandbox-Id header the SDKs send on every in-sandbox call (or
// is a signed /files URL, below).
//
// # Security
//
// Every control-plane request must carry the API key in X-API-Key (401
// otherwise). Every in-sandbox request must carry the sandbox's own
// access token in X-Access-Token: tokens are HMACs of the sandbox id
// under a key derived from the API key, compared in constant time, so a
// token of one sandbox never opens another (401, the same answer as no
// token), and a restarted server with the same key hands out the same
// tokens. The SDKs' uploadUrl and downloadUrl (signed /files URLs, which
// name no sandbox) are checked against the tokens the server holds in
// memory, without reading any record: the signature covers the path,
// the operation (GET reads, POST writes), the user and the expiry.
//
// Connections that have not authenticated (no request with the key or a
// token yet) are bounded apart from the others, per peer address and in
// total, the oldest idle one closed to make room, and every refusal
// closes its connection, so that idle connections without credentials
// cannot starve clients that have them.
//
// Requests are bounded: control-plane bodies (Options.MaxBodyBytes, 413
// past it), in-sandbox bodies and uploads, control-plane requests at
// once (429 with Retry-After), in-sandbox requests and streams of one
// sandbox at once (429), sandboxes (429), provisioning at once (queued),
// connections (1024), header size (64 KiB) and time (10 s), idle
// connections (2 min), and the time to send a control-plane body. A slow
// or stalled client therefore holds at most one slot of each kind.
// [CheckListenAddr] refuses plain HTTP on an address other than loopback
// unless the caller insists; [LoadOrCreateAPIKey] keeps the key in the
// state directory with mode 0600.
//
// # Templates
//
// A template is a tent policy file (package sandbox/policy) in
// Options.TemplatesDir, named TEMPLATE.yaml, TEMPLATE.yml or
// TEMPLATE.json; it is read at each create, so edits apply to the next
// sandbox. "base", the SDKs' default, is the zero sandbox.Spec (no
// network, no mounts, the restrictive defaults) with Options.BaseLimits
// unless a base file replaces it. Unless its template names a user, a
// sandbox runs as E2B's user: uid 1000 named user, HOME and working
// directory /home/user (its private home, kept by snapshots and forks). A template id that names no template is taken as a
// snapshot: its name (createSnapshot's name) or id. Metadata become the
// sandbox's labels (keys starting with "tent." are reserved: the label
// tent.template keeps the template), envVars are added to its
// environment.
//
// # Network
//
// E2B opens the internet unless told otherwise; tent's limited mode
// reaches only what its rules allow. A sandbox created with
// allow_internet_access false, or with denyOut containing 0.0.0.0/0 (the
// SDKs' ALL_TRAFFIC), runs in limited mode allowing exactly its allowOut
// entries (names, *.names, IPs, CIDRs, with optional ports); private
// addresses (loopback, RFC 1918, metadata) need an IP or CIDR entry. PUT
// .../network replaces them at run time. Settings that would leave the
// rest of the internet open are refused with 400 and how to say it in
// tent's terms. A create that chooses nothing (no rules, and
// allow_internet_access absent or true: E2B's default, which the Python
// SDK always sends) has its template's network (none for base), which
// cannot be opened at run time (409); the answer and getInfo report it.
//
// # Lifetime
//
// Each sandbox the server creates has a timeout (300 s unless the
// request says, at most Options.MaxTimeout): a timer kills it (or, with
// autoPause, pauses it) when it expires; setTimeout moves it, connect
// extends it. Pause freezes the sandbox's processes with the cgroup
// freezer (400 where the host gives sandboxes none); connect thaws them,
// and so does the first in-sandbox request with autoResume. Pause with
// memory false (autoPauseMemory false at the timeout) keeps only the
// files: a snapshot, then Handle.Stop; connect resumes the sandbox from
// it under the same id, a cold boot (see pauseFiles). Snapshots
// save the writable layers; fork snapshots a running sandbox once and
// starts each fork from it. Sandboxes of the backend that the server did
// not create (tent create's) are listed and usable, have no timeout until
// a client sets one, and are left alone by [Server.Close].
//
// # Ports
//
// getHost's host names (PORT-ID.DOMAIN, Options.Domain) and requests
// with E2B's E2b-Sandbox-Port header reach the sandbox's ports through
// [sandbox.Backend]'s Dial; see Options.PrivatePorts for who may.
//
// # Not served
//
// Each answers 501 with E2B's error body, or 400 where a create asks for
// it: templates (build, list, delete, tags, aliases), volumes and volume mounts, secrets, sandbox logs, teams and team
// metrics, MCP gateways, IAM tokens, network.rules other than header transforms
// and egressProxy, and metrics
// history (getMetrics returns one sample, taken now). See the package
// serve/envd documentation for the in-sandbox API's own list.
package serve
