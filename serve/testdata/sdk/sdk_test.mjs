// Drives tent serve with the official, unmodified E2B JavaScript SDK
// (pinned by serve/sdk_test.go, which starts the server and sets
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY). Every call's outcome is
// asserted; the script prints one line per step and exits non-zero if
// any failed.
//
// Set by the Go test: HOST_URL (an HTTP server on the host's loopback),
// RUN (a unique id), CAN_SUSPEND, CAN_LIMIT, HAS_CGROUP ("1" or "0"),
// ONLY (a regexp of step names to run; empty runs all).
import {
  ALL_TRAFFIC,
  AuthenticationError,
  CommandExitError,
  FilesystemEventType,
  Sandbox,
  SandboxError,
  SandboxNotFoundError,
  TimeoutError,
} from 'e2b'
import http from 'node:http'

const env = process.env
const RUN = env.RUN ?? String(Date.now())
const only = env.ONLY ? new RegExp(env.ONLY) : null
let failures = 0
let ran = 0

async function step(name, fn) {
  if (only && !only.test(name)) return
  ran++
  const t0 = Date.now()
  try {
    await fn()
    console.log(`ok   ${name} (${Date.now() - t0} ms)`)
  } catch (e) {
    failures++
    console.log(`FAIL ${name} (${Date.now() - t0} ms): ${e?.stack ?? e}`)
  }
}

// canonical is v as JSON with object keys sorted.
function canonical(v) {
  return JSON.stringify(v, (_, x) =>
    x && typeof x === 'object' && !Array.isArray(x) ? Object.fromEntries(Object.entries(x).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) : x)
}

function eq(got, want, what) {
  const g = canonical(got)
  const w = canonical(want)
  if (g !== w) throw new Error(`${what}: got ${g}, want ${w}`)
}

function ok(cond, what) {
  if (!cond) throw new Error(what)
}

// rejects awaits p and checks that it failed with an instance of cls
// whose message matches re; it returns the error.
async function rejects(p, cls, re, what) {
  let err
  try {
    await p
  } catch (e) {
    err = e
  }
  ok(err !== undefined, `${what}: succeeded, want ${cls.name}`)
  ok(err instanceof cls, `${what}: ${err?.constructor?.name}: ${err?.message}, want ${cls.name}`)
  ok(!re || re.test(err.message), `${what}: message ${JSON.stringify(err.message)} does not match ${re}`)
  return err
}

async function until(what, cond, ms = 10_000) {
  const end = Date.now() + ms
  while (Date.now() < end) {
    if (await cond()) return
    await new Promise((r) => setTimeout(r, 50))
  }
  throw new Error(`${what}: not within ${ms} ms`)
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

const sbx = await Sandbox.create({
  metadata: { suite: 'sdk', run: RUN },
  envs: { GREETING: 'hello' },
  timeoutMs: 120_000,
})
console.log(`ok   Sandbox.create (${sbx.sandboxId})`)

await step('the API key is required', async () => {
  await rejects(Sandbox.create({ apiKey: 'e2b_wrong' }), AuthenticationError, /invalid API key/, 'create with a wrong key')
  await rejects(Sandbox.list({ apiKey: 'e2b_wrong' }).nextItems(), AuthenticationError, null, 'list with a wrong key')
})

await step('Sandbox.create is refused what tent cannot enforce', async () => {
  await rejects(Sandbox.create({ network: { allowOut: ['example.com'] } }), SandboxError, /open internet/, 'allowOut without ALL_TRAFFIC denied')
  await rejects(Sandbox.create('no-such-template'), SandboxError, /not found/, 'an unknown template')
})

await step("allowInternetAccess: true (E2B's default) gets the template's network", async () => {
  const d = await Sandbox.create({ allowInternetAccess: true, timeoutMs: 60_000 })
  try {
    eq((await d.getInfo()).allowInternetAccess, false, 'base: no network, and getInfo says so')
  } finally {
    await d.kill()
  }
})

await step('commands.run in the foreground with onStdout', async () => {
  const seen = []
  const r = await sbx.commands.run('echo $GREETING; echo oops >&2', { onStdout: (d) => seen.push(d) })
  eq(r.exitCode, 0, 'exit code')
  eq(r.stdout, 'hello\n', 'stdout')
  eq(r.stderr, 'oops\n', 'stderr')
  eq(seen.join(''), 'hello\n', 'onStdout')
})

await step('commands.run: cwd and envs', async () => {
  const r = await sbx.commands.run('pwd; echo $A', { cwd: '/tmp', envs: { A: 'b c' } })
  eq(r.stdout, '/tmp\nb c\n', 'stdout')
})

await step('a non-zero exit is a CommandExitError', async () => {
  const err = await rejects(sbx.commands.run('echo no >&2; exit 3'), CommandExitError, null, 'exit 3')
  eq(err.exitCode, 3, 'exitCode')
  eq(err.stderr, 'no\n', 'stderr')
})

await step('a command past its timeoutMs is a TimeoutError', async () => {
  const t0 = Date.now()
  await rejects(sbx.commands.run('sleep 30', { timeoutMs: 700 }), TimeoutError, null, 'sleep 30 with timeoutMs 700')
  ok(Date.now() - t0 < 10_000, `took ${Date.now() - t0} ms`)
})

await step('background command: list, connect, kill', async () => {
  const h = await sbx.commands.run('sleep 60', { background: true })
  ok(h.pid > 0, `pid ${h.pid}`)
  const procs = await sbx.commands.list()
  ok(procs.some((p) => p.pid === h.pid), `list ${JSON.stringify(procs)} lacks pid ${h.pid}`)
  await h.disconnect()
  const again = await sbx.commands.connect(h.pid)
  eq(await sbx.commands.kill(h.pid), true, 'kill')
  await rejects(again.wait(), CommandExitError, null, 'wait after kill')
  await until('the killed command leaves the list', async () => !(await sbx.commands.list()).some((p) => p.pid === h.pid))
})

await step('a background command keeps running while disconnected', async () => {
  const h = await sbx.commands.run('for i in 1 2 3; do echo $i; sleep 0.3; done', { background: true })
  await h.disconnect()
  await sleep(200)
  const again = await sbx.commands.connect(h.pid)
  const r = await again.wait()
  eq(r.exitCode, 0, 'exit code')
  ok(r.stdout.trim().endsWith('3'), `stdout ${JSON.stringify(r.stdout)}`)
})

await step('stdin: sendStdin and closeStdin', async () => {
  const h = await sbx.commands.run('cat; echo done', { background: true, stdin: true })
  await sbx.commands.sendStdin(h.pid, 'abc\n')
  await h.sendStdin('def\n')
  await sbx.commands.closeStdin(h.pid)
  const r = await h.wait()
  eq(r.stdout, 'abc\ndef\ndone\n', 'stdout')
})

await step('pty.create, sendInput, resize', async () => {
  let out = ''
  const dec = new TextDecoder()
  const p = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d) } })
  await sbx.pty.sendInput(p.pid, new TextEncoder().encode('stty size\n'))
  await until('the first size', () => out.includes('24 80'))
  await sbx.pty.resize(p.pid, { cols: 100, rows: 30 })
  await sbx.pty.sendInput(p.pid, new TextEncoder().encode('stty size; exit 0\n'))
  await until('the new size', () => out.includes('30 100'))
  const r = await p.wait()
  eq(r.exitCode, 0, 'exit code')
})

await step('files: write, read, exists, getInfo, list, makeDir, rename, remove', async () => {
  const dir = `/tmp/sdk-${RUN}`
  const w = await sbx.files.write(`${dir}/a.txt`, 'hello files')
  eq(w.path, `${dir}/a.txt`, 'write path')
  eq(await sbx.files.read(`${dir}/a.txt`), 'hello files', 'read')
  eq(await sbx.files.exists(`${dir}/a.txt`), true, 'exists')
  const info = await sbx.files.getInfo(`${dir}/a.txt`)
  eq([info.name, info.type, info.size], ['a.txt', 'file', 11], 'getInfo')
  eq(await sbx.files.makeDir(`${dir}/sub`), true, 'makeDir')
  eq(await sbx.files.makeDir(`${dir}/sub`), false, 'makeDir again')
  await sbx.files.write(`${dir}/sub/deep/b.bin`, new Uint8Array([0, 1, 2, 255]).buffer)
  eq(Array.from(await sbx.files.read(`${dir}/sub/deep/b.bin`, { format: 'bytes' })), [0, 1, 2, 255], 'read bytes')
  eq((await sbx.files.list(dir)).map((e) => `${e.name}:${e.type}`).sort(), ['a.txt:file', 'sub:dir'], 'list')
  eq((await sbx.files.list(dir, { depth: 3 })).length, 4, 'list with depth 3')
  const moved = await sbx.files.rename(`${dir}/a.txt`, `${dir}/c.txt`)
  eq(moved.path, `${dir}/c.txt`, 'rename')
  eq(await sbx.files.exists(`${dir}/a.txt`), false, 'exists after rename')
  await sbx.files.remove(`${dir}/c.txt`)
  eq(await sbx.files.exists(`${dir}/c.txt`), false, 'exists after remove')
  const r = await sbx.commands.run(`cat ${dir}/sub/deep/b.bin | od -An -tu1`)
  eq(r.stdout.trim().split(/\s+/), ['0', '1', '2', '255'], 'the file as a command sees it')
})

await step('uploadUrl and downloadUrl (signed URLs)', async () => {
  const path = `/tmp/signed-${RUN}.txt`
  const form = new FormData()
  form.append('file', new Blob(['signed upload']), 'signed.txt')
  let res = await fetch(await sbx.uploadUrl(path, { useSignatureExpiration: 60 }), { method: 'POST', body: form })
  eq(res.status, 200, `upload: ${await res.clone().text()}`)
  const down = await sbx.downloadUrl(path)
  res = await fetch(down)
  eq([res.status, await res.text()], [200, 'signed upload'], 'download')
  res = await fetch(down.replace('signed-', 'other-'))
  eq(res.status, 401, 'a signature for another path')
  res = await fetch(down, { method: 'POST', body: form })
  eq(res.status, 401, 'a read signature used to write')
})

await step('files.watchDir', async () => {
  const dir = `/tmp/watch-${RUN}`
  await sbx.files.makeDir(dir)
  const events = []
  const w = await sbx.files.watchDir(dir, (e) => events.push(e))
  await sbx.files.write(`${dir}/new.txt`, 'x')
  await until('a create event', () => events.some((e) => e.name === 'new.txt' && e.type === FilesystemEventType.CREATE))
  await w.stop()
})

await step('setTimeout and getInfo', async () => {
  await sbx.setTimeout(60_000)
  const info = await sbx.getInfo()
  eq([info.sandboxId, info.templateId, info.state], [sbx.sandboxId, 'base', 'running'], 'getInfo')
  eq(info.metadata, { suite: 'sdk', run: RUN }, 'metadata')
  const left = info.endAt.getTime() - Date.now()
  ok(left > 50_000 && left <= 61_000, `endAt is ${left} ms away, want about 60 s`)
  ok(info.startedAt.getTime() <= Date.now(), `startedAt ${info.startedAt}`)
})

await step('getMetrics', async () => {
  const m = await sbx.getMetrics()
  if (env.HAS_CGROUP === '1') {
    eq(m.length, 1, 'samples')
    ok(m[0].memUsed > 0 && m[0].memTotal >= m[0].memUsed && m[0].cpuCount >= 1, `metrics ${JSON.stringify(m)}`)
  } else {
    eq(m, [], 'metrics without a cgroup')
  }
})

await step('a template from the templates directory', async () => {
  const t = await Sandbox.create('tenttest', { timeoutMs: 60_000 })
  try {
    const r = await t.commands.run('echo $FROM_TEMPLATE; hostname')
    eq(r.stdout, 'yes\ntenttest\n', 'the template applied')
    eq((await t.getInfo()).templateId, 'tenttest', 'templateId')
  } finally {
    await t.kill()
  }
})

await step('getHost reaches a port inside, with the trafficAccessToken', async () => {
  const w = await Sandbox.create('tenttest', { timeoutMs: 60_000, network: { allowPublicTraffic: false } })
  try {
    await w.commands.run('/opt/probe/testprobe httpserve 0.0.0.0:8000', { background: true })
    const host = w.getHost(8000)
    const api = new URL(env.E2B_API_URL)
    eq(host, `8000-${w.sandboxId}.localhost:${api.port}`, 'getHost')
    ok(typeof w.trafficAccessToken === 'string' && w.trafficAccessToken.length > 20, 'trafficAccessToken')
    // Node resolves names through the system, which may not take
    // *.localhost for loopback: the request goes to the server's address
    // with getHost's name as its Host.
    const get = (headers) => new Promise((resolve, reject) => {
      const req = http.request({ host: api.hostname, port: api.port, path: '/hello', headers: { Host: host, ...headers } }, (res) => {
        let body = ''
        res.on('data', (d) => { body += d })
        res.on('end', () => resolve({ status: res.statusCode, body }))
      })
      req.on('error', reject)
      req.end()
    })
    let r
    await until('the server inside answers', async () => {
      r = await get({ 'e2b-traffic-access-token': w.trafficAccessToken })
      return r.status === 200
    }, 30_000)
    ok(r.body.startsWith(`GET /hello\nHost: ${host}\n`), `the request inside: ${r.body}`)
    ok(!r.body.includes(w.trafficAccessToken), 'the token stays outside')
    eq((await get({})).status, 403, 'without the traffic access token')
  } finally {
    await w.kill()
  }
})

await step('network rules changed at run time', async () => {
  if (env.CAN_LIMIT !== '1') return
  const n = await Sandbox.create({ network: { denyOut: [ALL_TRAFFIC] }, timeoutMs: 60_000 })
  try {
    const curl = `curl -s -o /dev/null -w '%{http_code}' --noproxy '' -x "$http_proxy" ${env.HOST_URL}/`
    eq((await n.commands.run(curl)).stdout, '403', 'denied: loopback is private')
    await n.updateNetwork({ allowOut: ['127.0.0.1'], denyOut: [ALL_TRAFFIC] })
    eq((await n.commands.run(curl)).stdout, '200', 'allowed by an IP rule')
    eq((await n.getInfo()).network?.allowOut, ['127.0.0.1'], 'getInfo network')
    await n.updateNetwork({ denyOut: [ALL_TRAFFIC] })
    eq((await n.commands.run(curl)).stdout, '403', 'denied again')
    await rejects(n.updateNetwork({}), SandboxError, /open internet/, 'the open internet')
  } finally {
    await n.kill()
  }
})

await step('pause and Sandbox.connect', async () => {
  const p = await Sandbox.create({ timeoutMs: 60_000 })
  try {
    await p.files.write('/tmp/state.txt', 'kept')
    if (env.CAN_SUSPEND !== '1') {
      await rejects(p.pause(), SandboxError, /freezer/, 'pause without a freezer')
      return
    }
    const bg = await p.commands.run('sleep 1000', { background: true })
    eq(await p.pause(), true, 'pause')
    eq(await p.pause(), false, 'pause of a paused sandbox')
    eq((await p.getInfo()).state, 'paused', 'state')
    eq(await p.isRunning(), false, 'isRunning while paused')
    const c = await Sandbox.connect(p.sandboxId, { timeoutMs: 60_000 })
    eq((await c.getInfo()).state, 'running', 'state after connect')
    eq(await c.files.read('/tmp/state.txt'), 'kept', 'a file after resume')
    ok((await c.commands.list()).some((x) => x.pid === bg.pid), 'the background command survived the pause')
  } finally {
    await p.kill()
  }
})

await step('createSnapshot, Sandbox.create from it, listSnapshots, fork', async () => {
  await sbx.files.write('/tmp/snap.txt', 'in the snapshot')
  const snap = await sbx.createSnapshot({ name: `sdk-${RUN}` })
  ok(snap.snapshotId, `snapshot ${JSON.stringify(snap)}`)
  eq(snap.names, [`sdk-${RUN}`], 'names')
  for (const ref of [snap.snapshotId, `sdk-${RUN}`]) {
    const from = await Sandbox.create(ref, { timeoutMs: 60_000 })
    try {
      eq(await from.files.read('/tmp/snap.txt'), 'in the snapshot', `a file of a sandbox from ${ref}`)
    } finally {
      await from.kill()
    }
  }
  const listed = await sbx.listSnapshots().nextItems()
  ok(listed.some((s) => s.snapshotId === snap.snapshotId), `listSnapshots ${JSON.stringify(listed)}`)
  const [fork] = await sbx.fork({ count: 1, timeoutMs: 60_000 })
  ok(fork instanceof Sandbox, `fork: ${fork}`)
  try {
    ok(fork.sandboxId !== sbx.sandboxId, 'the fork has its own id')
    eq(await fork.files.read('/tmp/snap.txt'), 'in the snapshot', 'a file of the fork')
    eq((await fork.getInfo()).metadata, { suite: 'sdk', run: RUN }, 'the fork keeps the metadata')
  } finally {
    await fork.kill()
  }
  eq(await Sandbox.deleteSnapshot(snap.snapshotId), true, 'deleteSnapshot')
  eq(await Sandbox.deleteSnapshot(snap.snapshotId), false, 'deleteSnapshot of a deleted snapshot')
  ok(!(await sbx.listSnapshots().nextItems()).some((s) => s.snapshotId === snap.snapshotId), 'a deleted snapshot is not listed')
})

await step('Sandbox.list with metadata and state filters', async () => {
  const other = await Sandbox.create({ metadata: { suite: 'sdk', run: RUN, other: 'yes' }, timeoutMs: 60_000 })
  try {
    const all = await Sandbox.list({ query: { metadata: { run: RUN } } }).nextItems()
    eq(all.map((s) => s.sandboxId).sort(), [sbx.sandboxId, other.sandboxId].sort(), 'by run')
    const one = await Sandbox.list({ query: { metadata: { other: 'yes', run: RUN }, state: ['running'] } }).nextItems()
    eq(one.map((s) => s.sandboxId), [other.sandboxId], 'by two keys')
    eq(one[0].metadata, { suite: 'sdk', run: RUN, other: 'yes' }, 'metadata')
    const none = await Sandbox.list({ query: { metadata: { run: RUN }, state: ['paused'] } }).nextItems()
    eq(none, [], 'paused')
  } finally {
    await other.kill()
  }
})

await step('kill', async () => {
  const id = sbx.sandboxId
  eq(await sbx.kill(), true, 'kill')
  eq(await Sandbox.kill(id), false, 'kill of a killed sandbox')
  eq(await sbx.isRunning(), false, 'isRunning')
  await rejects(Sandbox.getInfo(id), SandboxNotFoundError, null, 'getInfo')
  await rejects(sbx.commands.run('true'), SandboxError, null, 'run in a killed sandbox')
})

console.log(`${ran} steps, ${failures} failed`)
process.exit(failures > 0 ? 1 : 0)
