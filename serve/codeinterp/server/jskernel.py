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
last expression, or the error), read as kernelbase.MarkedKernel reads them.

Interrupt (the client went away, or its timeout): SIGINT, which ends a
synchronous busy loop (the script runs with breakOnSigint) or an await that
does not resolve, keeping the context's state. A loop the signal cannot
reach (one that runs after an await) is ended by killing node after
INTERRUPT_GRACE seconds: the execution ends with KernelDied, the next starts
a new node and the context's state is lost.
"""

import asyncio
import json
import os
import shutil
import signal
import uuid

import jsdriver
import kernelbase
from kernelbase import KernelError, die_with_parent

NODE_PATH = "/usr/bin:/usr/local/bin"  # the host's node, not a user's
# Where the host's typescript module may be: Debian's node-typescript, then npm's global ones.
TYPESCRIPT_DIRS = (
    "/usr/share/nodejs/typescript",
    "/usr/lib/node_modules/typescript",
    "/usr/local/lib/node_modules/typescript",
)
INTERRUPT_GRACE = 3.0  # seconds SIGINT gets before node is killed


class JSKernel(kernelbase.MarkedKernel):
    """One node process that runs a context's cells in turn."""

    language = "javascript"
    program = "node"
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
        super().__init__(runtime_dir, env, cwd)
        self._commands = None  # the write transport of the command pipe

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
            proc = await asyncio.create_subprocess_exec(
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
        self._begin(proc)

    def _end_lines(self, run):
        try:
            reply = json.loads(run.tails.get("stdout", ""))
        except ValueError:
            reply = {"error": {"name": "KernelError", "value": "a malformed reply from node"}}
        return _reply_lines(reply if isinstance(reply, dict) else {}, run.silent)

    def execute(self, code, silent=False):
        """Sends a cell (or an env command, a tuple) to node; returns its execution."""
        ex, run = self._new_run(silent)
        if run is None:
            return ex
        if isinstance(code, tuple):
            cmd = {"op": code[0], "env": code[1], "mark": run.mark}
        else:
            cmd = {"op": "run", "code": code, "mark": run.mark}
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
        if not isinstance(err, dict):
            err = {"name": "KernelError", "value": str(err)}
        return [{"type": "error", "name": str(err.get("name", "")), "value": str(err.get("value", "")),
                 "traceback": str(err.get("traceback", ""))}]
    if "text" in reply and not silent:
        return [{"type": "result", "text": str(reply["text"]), "extra": {}, "is_main_result": True}]
    return []

