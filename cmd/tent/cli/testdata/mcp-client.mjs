// An agent's session with tent mcp through the official TypeScript client
// (@modelcontextprotocol/sdk), over stdio: node mcp-client.mjs TENT ARGS...
// starts "TENT ARGS..." as the server. It prints one JSON object of what
// it saw; the Go test (TestMCPTypeScriptClient) checks it.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const [command, ...args] = process.argv.slice(2);
const transport = new StdioClientTransport({ command, args, env: process.env, stderr: 'inherit' });
const client = new Client({ name: 'tent-ts-test', version: '1.0.0' });
const seen = {};
const call = async (name, args, options) => {
  const res = await client.callTool({ name, arguments: args }, undefined, options);
  return { error: !!res.isError, text: res.content.map((c) => c.text).join(''), out: res.structuredContent };
};

await client.connect(transport);
seen.server = client.getServerVersion().name;
seen.tools = (await client.listTools()).tools.map((t) => t.name).sort();
seen.create = await call('sandbox_create', { name: 'ts' });
seen.run = await call('shell', { command: 'echo hello from $(hostname)', sandbox: 'ts' });
await call('file_write', { path: '/tmp/app.js', content: 'const a = 1;\nconsole.log(a);\n', sandbox: 'ts' });
seen.edit = await call('file_edit', { path: '/tmp/app.js', old_string: 'const a = 1;', new_string: 'const a = 2;', sandbox: 'ts' });
seen.read = await call('file_read', { path: '/tmp/app.js', sandbox: 'ts' });
seen.grep = await call('file_grep', { pattern: 'a = \\d', path: '/tmp', sandbox: 'ts' });
seen.timeout = await call('shell', { command: 'sleep 30', timeout_seconds: 0.5, sandbox: 'ts' });
seen.denied = await call('exec', { argv: ['/opt/probe/testprobe', 'fetch', 'http://denied.test/'], sandbox: 'ts' });
seen.network = await call('network_status', { sandbox: 'ts' });
seen.widen = await call('sandbox_create', { mounts: ['/:/host'] });
const abort = new AbortController();
setTimeout(() => abort.abort(), 1000);
try {
  await call('shell', { command: 'exec sleep 61.75', sandbox: 'ts' }, { signal: abort.signal });
  seen.cancel = 'completed';
} catch (e) {
  seen.cancel = e.name + ': ' + e.message;
}
await client.close();
console.log(JSON.stringify(seen));
