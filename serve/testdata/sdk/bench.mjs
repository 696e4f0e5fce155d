// Measures tent serve through the official E2B SDK (serve/sdk_bench_test.go
// starts the server): N times Sandbox.create then the first
// commands.run('true'), then commands.run('true') round trips, then
// CONCURRENT sandboxes created at once. Prints one JSON line.
import { Sandbox } from 'e2b'

const n = Number(process.env.N ?? 20)
const concurrent = Number(process.env.CONCURRENT ?? 100)
const createRun = []
const run = []
for (let i = 0; i < n; i++) {
  const t0 = performance.now()
  const s = await Sandbox.create({ timeoutMs: 60_000 })
  await s.commands.run('true')
  createRun.push(performance.now() - t0)
  for (let j = 0; j < 5; j++) {
    const t1 = performance.now()
    await s.commands.run('true')
    run.push(performance.now() - t1)
  }
  await s.kill()
}
const t0 = performance.now()
const all = await Promise.allSettled(Array.from({ length: concurrent }, () => Sandbox.create({ timeoutMs: 120_000 })))
const ms = performance.now() - t0
const failed = all.filter((r) => r.status === 'rejected')
await Promise.all(all.filter((r) => r.status === 'fulfilled').map((r) => r.value.kill()))
console.log(JSON.stringify({ createRun, run, concurrent: { n: concurrent, ms, failed: failed.length, error: failed[0]?.reason?.message ?? '' } }))
