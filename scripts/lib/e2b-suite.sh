# shellcheck shell=bash
# e2b-suite.sh: what scripts/e2b-js-suite, e2b-py-suite and e2b-ci-suite
# share, sourced by them (bash, with set -euo pipefail): a temporary work
# directory and its cleanup, the tent binary, the tests from a git tag, a
# test CA and a certificate for *.tent.localhost, a `tent serve` of their
# own on loopback, and for the Node suites the `*.localhost` resolver and
# vitest's counts file by file.
#
# After suite_begin NAME: $repo (tent's checkout), $work (removed at exit,
# with the server stopped first). After suite_serve: $port, $key (the API
# key), $domain (tent.localhost:PORT, what E2B_DOMAIN takes), $server_pid;
# $work/ca.pem is the CA that signed the server's certificate.

suite_begin() {
	repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
	work=$(mktemp -d "/tmp/$1.XXXXXX")
	server_pid=
	trap suite_cleanup EXIT
	trap 'exit 130' INT TERM
}

suite_cleanup() {
	if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
		kill -TERM "$server_pid" 2>/dev/null || true
		for _ in $(seq 1 100); do
			kill -0 "$server_pid" 2>/dev/null || break
			sleep 0.2
		done
		kill -KILL "$server_pid" 2>/dev/null || true
		wait "$server_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}

# suite_tent: $tent, from TENT_BINARY or `make build`.
suite_tent() {
	tent=${TENT_BINARY:-}
	if [[ -z $tent ]]; then
		make -C "$repo" build >&2
		tent=$repo/bin/tent
	fi
}

# suite_tests GIT_DIR URL TAG DEST STRIP PATH...: the PATHs of the tag
# TAG, from GIT_DIR (a local git directory holding the tag) or, when it
# is empty, a shallow clone of URL, extracted into DEST without their
# first STRIP components.
suite_tests() {
	local gitdir=$1 url=$2 tag=$3 dest=$4 strip=$5
	shift 5
	if [[ -z $gitdir ]]; then
		git clone -q --depth 1 --branch "$tag" "$url" "$work/clone"
		gitdir=$work/clone/.git
	fi
	mkdir -p "$dest"
	git --git-dir="$gitdir" archive "$tag" "$@" | tar -x -C "$dest" --strip-components="$strip"
}

# suite_certs: a CA ($work/ca.pem) and the server's certificate for
# tent.localhost, *.tent.localhost and 127.0.0.1 ($work/cert.pem, key
# $work/key.pem) that it signed. Not one self-signed certificate: rustls
# (the Python SDK's HTTP client) refuses a CA certificate as a server's.
suite_certs() {
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj '/CN=tent test CA' \
		-keyout "$work/ca-key.pem" -out "$work/ca.pem" 2>/dev/null
	openssl req -newkey rsa:2048 -nodes -subj /CN=tent.localhost \
		-keyout "$work/key.pem" -out "$work/cert.csr" 2>/dev/null
	printf '%s\n' basicConstraints=CA:FALSE extendedKeyUsage=serverAuth \
		'subjectAltName=DNS:tent.localhost,DNS:*.tent.localhost,IP:127.0.0.1' >"$work/cert.ext"
	openssl x509 -req -in "$work/cert.csr" -CA "$work/ca.pem" -CAkey "$work/ca-key.pem" \
		-CAcreateserial -days 2 -extfile "$work/cert.ext" -out "$work/cert.pem" 2>/dev/null
}

# suite_free_port: a loopback port free now.
suite_free_port() {
	if command -v python3 >/dev/null; then
		python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
	else
		node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
	fi
}

# suite_serve: tent serve on a free loopback port over a state directory
# of its own, with TLS, a new API key and the templates of TENT_TEMPLATES
# (a directory) if set; waits for it to answer.
suite_serve() {
	local flags=()
	if [[ -n ${TENT_TEMPLATES:-} ]]; then
		flags=(--templates "$TENT_TEMPLATES")
	fi
	suite_certs
	port=$(suite_free_port)
	domain=tent.localhost:$port
	mkdir -m 0700 "$work/state"
	key=e2b_$(openssl rand -hex 20)
	(umask 077 && printf '%s\n' "$key" >"$work/api-key")
	"$tent" serve --listen "127.0.0.1:$port" --tls-cert "$work/cert.pem" --tls-key "$work/key.pem" \
		--domain "$domain" --state-dir "$work/state" --api-key-file "$work/api-key" "${flags[@]}" \
		>"$work/server.log" 2>&1 &
	server_pid=$!
	for _ in $(seq 1 100); do
		if curl -s -o /dev/null --cacert "$work/ca.pem" "https://127.0.0.1:$port/"; then
			return 0
		fi
		kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
		sleep 0.2
	done
	echo "tent serve did not answer in 20 s" >&2
	exit 1
}

# suite_node_localhost FILE: a --require hook for Node that resolves every
# name under localhost to loopback, without the system, and every other
# name to not found, so that no test's request (the SDK's own defaults,
# msw-mocked hosts the mock does not catch) leaves the machine.
suite_node_localhost() {
	cat >"$1" <<'EOF'
const dns = require('node:dns')
const local = (h) => typeof h === 'string' && (h === 'localhost' || h.endsWith('.localhost'))
const answer = (opts) => {
  const family = typeof opts === 'number' ? opts : (opts && opts.family) || 0
  const a = family === 6 ? { address: '::1', family: 6 } : { address: '127.0.0.1', family: 4 }
  return opts && opts.all ? [a] : a
}
const refuse = (host) =>
  Object.assign(new Error(`getaddrinfo ENOTFOUND ${host} (e2b suite: loopback only)`),
    { code: 'ENOTFOUND', errno: -3008, syscall: 'getaddrinfo', hostname: host })
dns.lookup = function (host, opts, cb) {
  if (typeof opts === 'function') [cb, opts] = [opts, {}]
  if (!local(host)) return process.nextTick(() => cb(refuse(host)))
  const a = answer(opts)
  process.nextTick(() => (Array.isArray(a) ? cb(null, a) : cb(null, a.address, a.family)))
}
dns.promises.lookup = function (host, opts) {
  if (!local(host)) return Promise.reject(refuse(host))
  return Promise.resolve(answer(opts))
}
EOF
}

# suite_vitest DIR WORKERS [VITEST-ARGS...]: vitest run in DIR with
# WORKERS workers against the server (E2B_DOMAIN, the key, the CA, the
# resolver hook), its JSON report in $work/results.json (copied to
# KEEP_RESULTS if set); sets $status.
suite_vitest() {
	local dir=$1 workers=$2
	shift 2
	suite_node_localhost "$work/localhost.cjs"
	status=0
	# shellcheck disable=SC2034 # $status is the caller's
	(cd "$dir" && env -u E2B_API_URL -u E2B_SANDBOX_URL -u E2B_ACCESS_TOKEN -u E2B_DEBUG \
		E2B_API_KEY="$key" E2B_DOMAIN="$domain" \
		NODE_EXTRA_CA_CERTS="$work/ca.pem" \
		NODE_OPTIONS="--require $work/localhost.cjs ${NODE_OPTIONS:-}" \
		npx vitest run --maxWorkers="$workers" --reporter=dot --reporter=json \
		--outputFile="$work/results.json" "$@") || status=$?
	if [[ -n ${KEEP_RESULTS:-} && -f $work/results.json ]]; then
		cp "$work/results.json" "$KEEP_RESULTS"
	fi
}

# suite_vitest_counts ROOT: the counts of $work/results.json file by file
# (names relative to ROOT/), then the total; without a report, exits with
# vitest's status.
suite_vitest_counts() {
	if [[ ! -f $work/results.json ]]; then
		echo "vitest wrote no report" >&2
		exit "$((status ? status : 1))"
	fi
	node - "$work/results.json" "$1/" <<'EOF'
const [file, root] = process.argv.slice(2)
const r = JSON.parse(require('node:fs').readFileSync(file, 'utf8'))
const t = { passed: 0, failed: 0, skipped: 0 }
const rows = []
for (const f of r.testResults) {
  const c = { passed: 0, failed: 0, skipped: 0 }
  for (const a of f.assertionResults) {
    if (a.status === 'passed') c.passed++
    else if (a.status === 'failed') c.failed++
    else c.skipped++
  }
  for (const k in t) t[k] += c[k]
  const load = f.assertionResults.length === 0 && f.status === 'failed' ? '  (file failed: ' + (f.message || '').split('\n')[0].slice(0, 100) + ')' : ''
  rows.push(`${String(c.passed).padStart(4)} ${String(c.failed).padStart(4)} ${String(c.skipped).padStart(4)}  ${f.name.replace(root, '')}${load}`)
}
console.log('pass fail skip  file')
console.log(rows.sort((a, b) => a.slice(16).localeCompare(b.slice(16))).join('\n'))
const broken = r.testResults.filter((f) => f.assertionResults.length === 0 && f.status === 'failed').length
console.log(`total: ${t.passed} passed, ${t.failed} failed, ${t.skipped} skipped, in ${r.testResults.length} files (${broken} failed to load)`)
EOF
}
