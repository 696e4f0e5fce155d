// Drives tent serve's built-in code-interpreter-v1 template with the
// official, unmodified @e2b/code-interpreter SDK (pinned by
// serve/codeinterp_sdk_test.go, which starts the server and sets
// E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY). Every call's outcome is
// asserted; one line per step; non-zero exit if any failed.
//
// Set by the Go test: HIDDEN (a host path the sandbox must not see),
// ONLY (a regexp of step names to run; empty runs all).
import { Sandbox } from '@e2b/code-interpreter'
import { TimeoutError } from 'e2b'

const env = process.env
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

function eq(got, want, what) {
  const g = JSON.stringify(got)
  const w = JSON.stringify(want)
  if (g !== w) throw new Error(`${what}: got ${g}, want ${w}`)
}

function ok(cond, what) {
  if (!cond) throw new Error(what)
}

// text is the main result's text of an execution that must not fail.
function text(ex, what) {
  if (ex.error) throw new Error(`${what}: ${ex.error.name}: ${ex.error.value}`)
  return ex.text
}

let sbx
await step('create', async () => {
  sbx = await Sandbox.create({ timeoutMs: 300_000, allowInternetAccess: false })
  ok(sbx.sandboxId, 'no sandbox id')
})
if (!sbx) {
  console.log(`${ran} steps, ${failures} failed`)
  process.exit(1)
}

try {
  await step('stateful', async () => {
    eq(text(await sbx.runCode('x = 41; x + 1'), 'first'), '42', 'x + 1')
    eq(text(await sbx.runCode('x += 1; x'), 'second'), '42', 'x after +=')
  })

  await step('streams and callbacks', async () => {
    const out = []
    const err = []
    const ex = await sbx.runCode('import sys\nprint("to out")\nprint("to err", file=sys.stderr)', {
      onStdout: (m) => out.push(m.line),
      onStderr: (m) => err.push(m.line),
    })
    eq(ex.logs.stdout, ['to out\n'], 'stdout')
    eq(ex.logs.stderr, ['to err\n'], 'stderr')
    eq(out, ['to out\n'], 'onStdout')
    eq(err, ['to err\n'], 'onStderr')
  })

  await step('error with traceback', async () => {
    const ex = await sbx.runCode('def f():\n    return 1 / 0\nf()')
    ok(ex.error, 'no error')
    eq([ex.error.name, ex.error.value], ['ZeroDivisionError', 'division by zero'], 'error')
    ok(ex.error.traceback.includes('return 1 / 0'), `traceback: ${ex.error.traceback}`)
  })

  await step('pandas and a chart', async () => {
    const code = [
      'import io, pandas as pd, matplotlib.pyplot as plt',
      'df = pd.read_csv(io.StringIO("month,sales\\n1,10\\n2,30\\n3,20\\n"))',
      'plt.plot(df["month"], df["sales"])',
      'plt.title("Sales")',
      'plt.xlabel("month")',
      'plt.ylabel("sales")',
      'plt.show()',
    ].join('\n')
    const ex = await sbx.runCode(code)
    ok(!ex.error, `error: ${ex.error?.name}: ${ex.error?.value}`)
    const fig = ex.results.find((r) => r.png)
    ok(fig, `no PNG among ${ex.results.length} results`)
    ok(Buffer.from(fig.png, 'base64').subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])), 'not a PNG')
    ok(fig.chart, 'no chart')
    eq([fig.chart.type, fig.chart.title, fig.chart.x_label, fig.chart.y_label], ['line', 'Sales', 'month', 'sales'], 'chart')
    eq(fig.chart.elements[0].points, [[1, 10], [2, 30], [3, 20]], 'points')
    const df = await sbx.runCode('df')
    ok(df.results[0]?.isMainResult && df.results[0].html?.includes('<table'), 'a DataFrame has no HTML table')
  })

  await step('env vars for one execution', async () => {
    const code = 'import os; os.environ.get("TENT_CI_VAR")'
    // As E2B's server, a string result's text is the string, unquoted.
    eq(text(await sbx.runCode(code, { envs: { TENT_CI_VAR: 'set' } }), 'with'), 'set', 'with envs')
    eq(await sbx.runCode(code).then((ex) => ex.text), undefined, 'after (restored)')
  })

  await step('contexts', async () => {
    const ctx = await sbx.createCodeContext({ cwd: '/tmp' })
    eq([ctx.language, ctx.cwd], ['python', '/tmp'], 'context')
    eq(text(await sbx.runCode('import os; y = 7; os.getcwd()', { context: ctx }), 'in ctx'), '/tmp', 'cwd')
    const other = await sbx.runCode('y')
    eq(other.error?.name, 'NameError', 'y outside its context')
    eq(text(await sbx.runCode('y', { context: ctx }), 'y'), '7', 'y in its context')
    ok((await sbx.listCodeContexts()).some((c) => c.id === ctx.id), 'not listed')
    await sbx.restartCodeContext(ctx)
    eq((await sbx.runCode('y', { context: ctx })).error?.name, 'NameError', 'y after restart')
    await sbx.removeCodeContext(ctx)
    ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id), 'listed after removal')
  })

  await step('a timeout interrupts, another context runs meanwhile', async () => {
    const busy = await sbx.createCodeContext()
    const loop = sbx.runCode('while True:\n    pass', { context: busy, timeoutMs: 3000 })
    eq(text(await sbx.runCode('1 + 1'), 'meanwhile'), '2', 'the other context')
    let err
    try {
      await loop
    } catch (e) {
      err = e
    }
    ok(err instanceof TimeoutError, `the loop: ${err}`)
    // The kernel was interrupted, not left spinning: the context answers.
    eq(text(await sbx.runCode('"free"', { context: busy }), 'after'), 'free', 'after the timeout')
  })

  await step('confined like any command', async () => {
    const code = [
      'import errno, os, socket',
      'r = []',
      'try:\n    open("/usr/tent-escape", "w")\nexcept OSError as e:\n    r.append(errno.errorcode[e.errno])',
      // allowInternetAccess: false is a deny-all network: refused at once.
      's = socket.socket()',
      'try:\n    s.connect(("192.0.2.1", 80))\nexcept OSError as e:\n    r.append(errno.errorcode[e.errno])',
      `r.append(os.path.exists(${JSON.stringify(env.HIDDEN ?? '/nonexistent')}))`,
      'r',
    ].join('\n')
    eq(text(await sbx.runCode(code), 'escapes'), "['EROFS', 'ECONNREFUSED', False]", 'escapes')
  })

  await step('the server comes back after kill -9', async () => {
    await sbx.commands.run("kill -9 $(pgrep -f '[t]ent-code-interpreter-.*/main.py')")
    let last
    for (let i = 0; i < 120; i++) {
      try {
        const ex = await sbx.runCode('"back"', { requestTimeoutMs: 5000 })
        if (ex.text === 'back') return
        last = ex.error?.value
      } catch (e) {
        last = e
      }
      await new Promise((r) => setTimeout(r, 500))
    }
    throw new Error(`not back: ${last}`)
  })
} finally {
  await sbx.kill()
}
console.log(`${ran} steps, ${failures} failed`)
process.exit(failures ? 1 : 0)
