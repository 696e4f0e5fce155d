"""A JavaScript "kernel" of tent's Code Interpreter: one persistent node process.

Debian has no Jupyter JavaScript kernel, so the server keeps a node of its own
per context, running a driver (jsdriver.py's SOURCE, written to the server's
private directory). The server sends commands as JSON lines on a pipe of
their own (not node's stdin, which is /dev/null); the driver runs each cell
as a script in node's main context, so that top-level let, const, class and
function declarations persist from one execution to the next, as in node's
REPL (let, const and class become vars, so that a later cell can declare
them again, as in Chrome's console and Deno's kernel). Top-level await and the binding hoisting it needs are node's own REPL
transform (internal/repl/await, hence --expose-internals); static imports
are rewritten to dynamic ones with node's own parser (acorn), since a script
cannot hold them and a module would give no value for its last expression.

Output is whatever node and its children write on stdout and stderr. A cell
ends with a marker line on each (the stdout one carries the value of the
last expression, or the error), as in the bash kernel. Output is passed on
with backpressure: a client that reads slowly stops node, not the server's
memory.

Interrupt (the client went away, or its timeout): SIGINT, which ends a
synchronous busy loop (the script runs with breakOnSigint) or an await that
does not resolve, keeping the context's state. A loop the signal cannot
reach (one that runs after an await) is ended by killing node after
INTERRUPT_GRACE seconds: the execution ends with KernelDied, the next starts
a new node and the context's state is lost.
"""

import asyncio
import codecs
import json
import logging
import os
import shutil
import signal
import uuid

import jsdriver
import outputs
import kernelbase
from kernelbase import KernelError, die_with_parent, kill_group, partial_suffix

log = logging.getLogger("tent-ci")

NODE_PATH = "/usr/bin:/usr/local/bin"  # the host's node, not a user's
# Where the host's typescript module may be: Debian's node-typescript, then npm's global ones.
TYPESCRIPT_DIRS = (
    "/usr/share/nodejs/typescript",
    "/usr/lib/node_modules/typescript",
    "/usr/local/lib/node_modules/typescript",
)
CHUNK = 65536
QUEUE_ITEMS = 32  # chunks of output held for a slow client: 2 MiB at most
MAX_REPLY = 4 << 20  # bytes of a marker line (the driver clips results at 1 MiB)
INTERRUPT_GRACE = 3.0  # seconds SIGINT gets before node is killed


class _Queue:
    """A queue bounded in output lines; the end of an execution always fits."""

    def __init__(self, limit):
        self._q = asyncio.Queue()
        self._room = asyncio.Semaphore(limit)

    async def put(self, item):
        await self._room.acquire()
        self._q.put_nowait((True, item))

    def put_final(self, item):
        self._q.put_nowait((False, item))

    async def get(self):
        counted, item = await self._q.get()
        if counted:
            self._room.release()
        return item


class Execution:
    """The output lines of one cell, then None (see outputs.Execution)."""

    def __init__(self):
        self.queue = _Queue(QUEUE_ITEMS)
        self.done = False
        self.errored = False

    async def put(self, item):
        if not self.done:
            await self.queue.put(item)

    def end(self, *items):
        if not self.done:
            for item in items:
                self.queue.put_final(item)
            self.queue.put_final(None)
            self.done = True

    def fail(self, name, value):
        self.end({"type": "error", "name": name, "value": value, "traceback": ""})


class _Run:
    """The cell node is running: its marker and what is left to read."""

    def __init__(self, ex, mark, silent):
        self.ex, self.mark, self.silent = ex, mark, silent
        self.bufs = {"stdout": "", "stderr": ""}
        self.ended = set()
        self.reply = {}


class JSKernel(kernelbase.ProcessKernel):
    """One node process that runs a context's cells in turn."""

    language = "javascript"
    typescript = False  # whether cells are TypeScript, transpiled by the driver

    @staticmethod
    def node():
        return shutil.which("node", path=NODE_PATH)

    @staticmethod
    def typescript_dir():
        """The directory of the host's typescript module, or None."""
        for d in TYPESCRIPT_DIRS:
            if os.path.isfile(os.path.join(d, "package.json")):
                return d
        return None

    @classmethod
    def available(cls):
        return cls.node() is not None and (not cls.typescript or cls.typescript_dir() is not None)

    def __init__(self, runtime_dir, env, cwd):
        self.runtime_dir, self.env, self.cwd = runtime_dir, env, cwd
        self.proc = None
        self.count = 0
        self._run = None
        self._tasks = []
        self._commands = None  # the write transport of the command pipe
        self._closing = False
        self._killed = None  # why the server killed node, if it did

    @property
    def alive(self):
        return self.proc is not None and self.proc.returncode is None

    def _driver(self):
        path = os.path.join(self.runtime_dir, "jsdriver.js")
        if not os.path.exists(path):
            tmp = f"{path}.{uuid.uuid4().hex}"
            with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
                f.write(jsdriver.SOURCE)
            os.replace(tmp, path)
        return path

    async def start(self):
        node = self.node()
        if node is None:
            raise KernelError("there is no node in " + NODE_PATH)
        extra = []
        if self.typescript:
            ts = self.typescript_dir()
            if ts is None:
                raise KernelError("there is no typescript module in " + ", ".join(TYPESCRIPT_DIRS))
            extra.append(ts)
        r, w = os.pipe()
        try:
            self.proc = await asyncio.create_subprocess_exec(
                node, "--expose-internals", self._driver(), str(r), *extra,
                cwd=self.cwd, env=self.env, pass_fds=(r,),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                preexec_fn=die_with_parent,
                process_group=0,
            )
        except OSError as e:
            os.close(w)
            raise KernelError(f"node did not start: {e}") from e
        finally:
            os.close(r)
        os.set_blocking(w, False)
        loop = asyncio.get_running_loop()
        self._commands, _ = await loop.connect_write_pipe(asyncio.Protocol, open(w, "wb", buffering=0))
        self._killed = None
        self.count = 0  # a new node counts from 1, as a new Jupyter kernel
        proc = self.proc
        self._tasks = [
            asyncio.ensure_future(self._read(proc, "stdout")),
            asyncio.ensure_future(self._read(proc, "stderr")),
            asyncio.ensure_future(self._watch(proc)),
        ]

    async def ready(self):
        if not self.alive and not self._closing:
            await self.restart()

    async def _watch(self, proc):
        code = await proc.wait()
        if proc is not self.proc or self._closing:
            return
        if self._killed:
            self._fail("KernelDied", self._killed)
        else:
            log.warning("node %d exited with status %s", proc.pid, code)
            self._fail(
                "KernelDied",
                f"node exited (status {code}): the context's state is lost; the next execution starts a new node",
            )

    def _fail(self, name, value):
        run, self._run = self._run, None
        if run is not None:
            run.ex.fail(name, value)

    async def _read(self, proc, name):
        stream = getattr(proc, name)
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        while True:
            data = await stream.read(CHUNK)
            if not data:
                return
            run = self._run
            if run is None:
                decoder.reset()
                continue
            run.bufs[name] += decoder.decode(data)
            await self._drain(proc, run, name)

    async def _drain(self, proc, run, name):
        buf = run.bufs[name]
        i = buf.find(run.mark)
        if i >= 0:
            j = buf.find("\n", i)
            if j < 0:
                if len(buf) - i > MAX_REPLY:
                    self._kill(proc, "the javascript kernel's reply was too long: it was restarted")
                return  # the marker's line is not all there yet
            text, tail = buf[:i], buf[i + len(run.mark):j]
            run.bufs[name] = ""
        else:
            keep = partial_suffix(buf, run.mark)
            text, run.bufs[name] = buf[: len(buf) - keep], buf[len(buf) - keep:]
        if text and not run.silent:
            # This may wait for room (a slow client): the stream is marked
            # ended only after, or the other stream's marker could end the
            # execution meanwhile and this text would come after its end.
            await run.ex.put({"type": name, "text": text, "timestamp": outputs.timestamp({})})
        if i < 0:
            return
        run.ended.add(name)
        if name == "stdout":
            try:
                run.reply = json.loads(tail)
            except ValueError:
                run.reply = {"error": {"name": "KernelError", "value": "a malformed reply from node"}}
        if len(run.ended) == 2 and self._run is run:
            self._run = None
            run.ex.end(*_reply_lines(run.reply, run.silent))

    def execute(self, code, silent=False):
        """Sends a cell (or an env command, a tuple) to node; returns its Execution."""
        ex = Execution()
        if not self.alive:
            ex.fail("KernelDied", "node is not running")
            return ex
        if self._run is not None:  # the context's lock prevents it
            ex.fail("Busy", "node is running another execution")
            return ex
        if not silent:
            self.count += 1
            ex.queue.put_final({"type": "number_of_executions", "execution_count": self.count})
        mark = "__tent_ci_" + uuid.uuid4().hex
        if isinstance(code, tuple):
            cmd = {"op": code[0], "env": code[1], "mark": mark}
        else:
            cmd = {"op": "run", "code": code, "mark": mark}
        self._run = _Run(ex, mark, silent)
        self._commands.write(json.dumps(cmd).encode() + b"\n")
        return ex

    def set_env_code(self, env_vars):
        return ("env_push", dict(env_vars))

    def reset_env_code(self):
        return ("env_pop", {})

    def interrupt(self):
        if not self.alive:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGINT)
        except ProcessLookupError:
            return
        run, proc = self._run, self.proc
        if run is not None:
            asyncio.get_running_loop().call_later(INTERRUPT_GRACE, self._kill_if_running, proc, run)

    def _kill_if_running(self, proc, run):
        if self.proc is proc and self._run is run:
            self._kill(proc, "the code did not stop on interrupt: node was killed, the context's state is lost")

    def _kill(self, proc, why):
        log.warning("context's node %d killed: %s", proc.pid, why)
        self._killed = why
        kill_group(proc.pid, signal.SIGKILL)

    def _release(self):
        if self._commands is not None:
            self._commands.close()
            self._commands = None


class TSKernel(JSKernel):
    """A TypeScript context: the JavaScript kernel, its cells transpiled first."""

    language = "typescript"
    typescript = True


def _reply_lines(reply, silent):
    """The result or error lines of the driver's reply."""
    err = reply.get("error")
    if err:
        return [{"type": "error", "name": str(err.get("name", "")), "value": str(err.get("value", "")),
                 "traceback": str(err.get("traceback", ""))}]
    if "text" in reply and not silent:
        return [{"type": "result", "text": str(reply["text"]), "extra": {}, "is_main_result": True}]
    return []

