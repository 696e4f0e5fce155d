// Measures tent serve's code-interpreter-v1 through the official
// @e2b/code-interpreter SDK (serve/codeinterp_sdk_test.go starts the
// server): N times Sandbox.create then the first runCode('1+1') result,
// and WARM runCode('1+1') round trips in one sandbox. Prints one JSON line.
import { Sandbox } from '@e2b/code-interpreter'

const n = Number(process.env.N ?? 5)
const warm = Number(process.env.WARM ?? 20)
const createFirst = []
const run = []
for (let i = 0; i < n; i++) {
  const t0 = performance.now()
  const s = await Sandbox.create({ timeoutMs: 120_000, allowInternetAccess: false })
  const ex = await s.runCode('1+1')
  if (ex.text !== '2') throw new Error(`runCode('1+1'): ${ex.text} ${ex.error?.value}`)
  createFirst.push(performance.now() - t0)
  if (i === 0) {
    for (let j = 0; j < warm; j++) {
      const t1 = performance.now()
      await s.runCode('1+1')
      run.push(performance.now() - t1)
    }
  }
  await s.kill()
}
console.log(JSON.stringify({ createFirst, run }))
