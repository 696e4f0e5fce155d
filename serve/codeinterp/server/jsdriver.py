"""The source of the JavaScript kernel's node driver (see jskernel.py).

It is a Python string so that the server's archive (Python files only)
carries it; jskernel.py writes it to the server's private directory.
"""

SOURCE = r"""'use strict';
// tent's Code Interpreter JavaScript driver: one per context, run by
// server/jskernel.py as `node --expose-internals driver.js FD [TYPESCRIPT]`,
// TYPESCRIPT the directory of the typescript module for a TypeScript
// context, whose cells are transpiled to JavaScript first. Commands come
// as JSON lines on FD; each run ends with MARK + JSON + "\n" on stdout and
// MARK + "\n" on stderr, after the run's own output.
const net = require('net');
const path = require('path');
const readline = require('readline');
const util = require('util');
const vm = require('vm');
const { createRequire, builtinModules } = require('module');
const { pathToFileURL } = require('url');

const MAX_TEXT = 1 << 20; // bytes of a result's text or an error's stack

let topLevelAwait = null;
let acorn = null;
try {
  topLevelAwait = require('internal/repl/await').processTopLevelAwait;
  acorn = require('internal/deps/acorn/acorn/dist/acorn');
} catch (e) {
  // A node without its REPL's internals: no top-level await or static imports.
}

// Imports resolve from the working directory: with node's own loader for
// scripts (20.12 and later); before it, static imports only, with the
// driver's import() of what require resolves (a package's "import" export
// aside), as a script's import() needs --experimental-vm-modules there.
function importFromCwd(spec) {
  if (spec.startsWith('node:') || builtinModules.includes(spec)) return import(spec);
  if (/^\.{0,2}\//.test(spec)) return import(pathToFileURL(path.resolve(spec)).href);
  if (/^[a-z]+:/i.test(spec)) return import(spec);
  return import(pathToFileURL(createRequire(path.join(process.cwd(), '[cell]')).resolve(spec)).href);
}
const loader = vm.constants && vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER;
const importer = loader ? 'import' : "globalThis[Symbol.for('tent.import')]";
Object.defineProperty(globalThis, Symbol.for('tent.import'), { value: importFromCwd });
const emitWarning = process.emitWarning;
process.emitWarning = function (w, ...rest) {
  if (String((w && w.message) || w).includes('USE_MAIN_CONTEXT_DEFAULT_LOADER')) return undefined;
  return emitWarning.call(this, w, ...rest);
};

// Blocking writes: a full pipe (a client that reads slowly) stops node,
// rather than node holding what it could not write.
for (const s of [process.stdout, process.stderr]) {
  if (s._handle && typeof s._handle.setBlocking === 'function') s._handle.setBlocking(true);
}
const stdoutWrite = process.stdout.write.bind(process.stdout);
const stderrWrite = process.stderr.write.bind(process.stderr);
const envStack = [];
let current = null; // the run in progress: its interrupt()
let cells = 0;

function clip(s) {
  return s.length > MAX_TEXT ? s.slice(0, MAX_TEXT) + '\n[truncated]' : s;
}

// The globals a REPL gives: require and module from the working directory.
function setGlobals() {
  const file = path.join(process.cwd(), '[cell]');
  const req = createRequire(file);
  for (const [k, v] of Object.entries({ require: req, module: { exports: {}, require: req, filename: file } })) {
    Object.defineProperty(globalThis, k, { value: v, writable: true, configurable: true, enumerable: false });
  }
}

// What a script cannot hold, or would refuse in a cell run again, as
// node's parser sees it: static imports become dynamic ones, top-level let,
// const and class declarations vars (as V8's REPL mode, which Chrome's
// console and Deno's kernel use, lets them be declared again; a const is
// then assignable).
function rewrite(code) {
  if (!acorn || !/\b(import|let|const|class)\b/.test(code)) return code;
  let tree;
  try {
    tree = acorn.parse(code, { ecmaVersion: 'latest', sourceType: 'module', allowAwaitOutsideFunction: true, allowReturnOutsideFunction: true, allowHashBang: true });
  } catch (e) {
    return code; // the compiler reports it
  }
  let out = code;
  for (const n of tree.body.slice().reverse()) {
    let text = null;
    if (n.type === 'ImportDeclaration') text = importOf(n);
    else if (n.type === 'VariableDeclaration' && n.kind !== 'var') text = 'var' + code.slice(n.start + n.kind.length, n.end);
    else if (n.type === 'ClassDeclaration') text = `var ${n.id.name} = ${code.slice(n.start, n.end)};`;
    if (text !== null) out = out.slice(0, n.start) + text + out.slice(n.end);
  }
  return out;
}

// import ... from 'm' as var bindings of await import('m').
function importOf(n) {
  const name = (x) => (x.type === 'Identifier' ? x.name : x.value);
  const src = `await ${importer}(${JSON.stringify(n.source.value)})`;
  const parts = [];
  const names = [];
  for (const s of n.specifiers) {
    if (s.type === 'ImportNamespaceSpecifier') parts.push(`var ${s.local.name} = ${src};`);
    else if (s.type === 'ImportDefaultSpecifier') names.push(`default: ${s.local.name}`);
    else names.push(`${JSON.stringify(name(s.imported))}: ${s.local.name}`);
  }
  if (names.length) parts.push(`var { ${names.join(', ')} } = ${src};`);
  if (!parts.length) parts.push(`${src};`);
  return parts.join(' ');
}

// A TypeScript cell as JavaScript (types erased; imports and top-level await
// left for rewrite() and node's REPL transform), or a SyntaxError. The
// transpiler checks syntax only, not types.
const typescriptDir = process.argv[3] || '';
let ts = null;
function transpile(code) {
  if (!typescriptDir) return code;
  if (!ts) ts = require(typescriptDir);
  const out = ts.transpileModule(code, {
    reportDiagnostics: true,
    compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext },
  });
  const d = (out.diagnostics || [])[0];
  if (d) {
    const where = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start) : null;
    const at = where ? ` (${where.line + 1}:${where.character + 1})` : '';
    const e = new SyntaxError(`TS${d.code}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}${at}`);
    e.stack = `SyntaxError: ${e.message}`;
    throw e;
  }
  return out.outputText;
}

function errorOf(e) {
  if (e instanceof Error || (e && typeof e === 'object' && 'stack' in e)) {
    const stack = String(e.stack || '')
      .split('\n')
      .filter((l) => !l.includes(__filename) && !/\((node:)?(vm|internal\/)/.test(l) && !/at node:/.test(l))
      .join('\n');
    return { name: String(e.name || 'Error'), value: String(e.message ?? ''), traceback: clip(stack) };
  }
  return { name: 'Error', value: clip(String(util.inspect(e))), traceback: '' };
}

function textOf(v) {
  return clip(typeof v === 'string' ? v : util.inspect(v));
}

// A cell that is an object literal is one, not a block (as in node's REPL).
function objectLiteral(code) {
  if (!/^\s*{/.test(code) || !/}\s*$/.test(code)) return code;
  try {
    new vm.Script(`(${code.trim()}\n)`);
    return `(${code.trim()}\n)`;
  } catch (e) {
    return code;
  }
}

async function evaluate(code) {
  let src = rewrite(transpile(objectLiteral(code)));
  const wrapped = topLevelAwait && src.includes('await') ? topLevelAwait(src) : null;
  if (wrapped) src = wrapped;
  cells += 1;
  const script = new vm.Script(src, {
    filename: path.join(process.cwd(), `[cell ${cells}]`),
    ...(loader ? { importModuleDynamically: loader } : {}),
  });
  setGlobals();
  let value = script.runInThisContext({ breakOnSigint: true, displayErrors: false });
  if (wrapped) {
    let stop;
    const interrupted = new Promise((_, reject) => {
      stop = () => reject(Object.assign(new Error('Script execution interrupted.'), { code: 'ERR_SCRIPT_EXECUTION_INTERRUPTED' }));
    });
    current = { interrupt: stop };
    try {
      value = (await Promise.race([value, interrupted]))?.value;
    } finally {
      current = null;
    }
  }
  return value;
}

async function run(cmd) {
  const reply = {};
  try {
    if (cmd.op === 'env_push') {
      const saved = {};
      for (const [k, v] of Object.entries(cmd.env)) {
        saved[k] = Object.prototype.hasOwnProperty.call(process.env, k) ? process.env[k] : undefined;
        process.env[k] = v;
      }
      envStack.push(saved);
    } else if (cmd.op === 'env_pop') {
      for (const [k, v] of Object.entries(envStack.pop() || {})) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    } else {
      const value = await evaluate(cmd.code);
      if (value !== undefined) reply.text = textOf(value);
    }
  } catch (e) {
    reply.error = errorOf(e);
  }
  stdoutWrite(cmd.mark + JSON.stringify(reply) + '\n');
  stderrWrite(cmd.mark + '\n');
}

process.on('SIGINT', () => current && current.interrupt());
process.on('uncaughtException', (e) => stderrWrite(`Uncaught ${util.inspect(e)}\n`));
process.on('unhandledRejection', (e) => stderrWrite(`Uncaught (in promise) ${util.inspect(e)}\n`));

const fd = Number(process.argv[2]);
const lines = readline.createInterface({ input: new net.Socket({ fd, readable: true, writable: false }), crlfDelay: Infinity });
let chain = Promise.resolve();
lines.on('line', (l) => {
  const cmd = JSON.parse(l);
  chain = chain.then(() => run(cmd));
});
lines.on('close', () => process.exit(0));
"""
