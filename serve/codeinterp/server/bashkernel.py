"""A bash "kernel" of tent's Code Interpreter: one persistent bash process.

Debian has no Jupyter bash kernel, so the server keeps a bash of its own per
context. Each execution's code goes to a file in the server's private
directory; bash sources it with stdin from /dev/null, then prints a marker
(with the status) on stdout and on stderr: the output before the markers is
the execution's. Variables, functions and the working directory persist
between executions, as in a kernel. A non-zero status is an error whose value
is the status, as E2B's bash kernel reports it.
"""

import asyncio
import codecs
import logging
import os
import shutil
import signal
import uuid

import outputs
import kernelbase
from kernelbase import KernelError, die_with_parent, kill_group, partial_suffix

log = logging.getLogger("tent-ci")

CHUNK = 65536


def _quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


def _valid_name(k):
    return k and (k[0].isalpha() or k[0] == "_") and all(c.isalnum() or c == "_" for c in k)


class _Run:
    """The execution bash is running: its markers and what is left to read."""

    def __init__(self, ex, mark, silent):
        self.ex, self.mark, self.silent = ex, mark, silent
        self.bufs = {"stdout": "", "stderr": ""}
        self.ended = set()
        self.status = 0


class BashKernel(kernelbase.ProcessKernel):
    """One bash process that runs a context's executions in turn."""

    language = "bash"

    @staticmethod
    def available():
        return shutil.which("bash") is not None

    def __init__(self, runtime_dir, env, cwd):
        self.runtime_dir, self.env, self.cwd = runtime_dir, env, cwd
        self.proc = None
        self.count = 0
        self._run = None
        self._tasks = []
        self._closing = False

    @property
    def alive(self):
        return self.proc is not None and self.proc.returncode is None

    async def start(self):
        try:
            self.proc = await asyncio.create_subprocess_exec(
                "bash", "--noprofile", "--norc",
                cwd=self.cwd, env=self.env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                preexec_fn=die_with_parent,
                process_group=0,
            )
        except OSError as e:
            raise KernelError(f"bash did not start: {e}") from e
        # SIGINT ends the running command, not bash.
        self.proc.stdin.write(b"trap : INT\n")
        proc = self.proc
        self._tasks = [
            asyncio.ensure_future(self._read(proc.stdout, "stdout")),
            asyncio.ensure_future(self._read(proc.stderr, "stderr")),
            asyncio.ensure_future(self._watch(proc)),
        ]

    async def ready(self):
        if not self.alive and not self._closing:
            await self.restart()

    async def _watch(self, proc):
        code = await proc.wait()
        if proc is self.proc and not self._closing:
            log.warning("bash %d exited with status %s", proc.pid, code)
            self._fail("KernelDied", f"bash exited (status {code}); the next execution starts a new one")

    def _fail(self, name, value):
        run, self._run = self._run, None
        if run is not None:
            run.ex.fail(name, value)

    async def _read(self, stream, name):
        # Incremental: a character whose bytes two reads split comes whole.
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
            self._drain(run, name)

    def _drain(self, run, name):
        buf = run.bufs[name]
        i = buf.find(run.mark)
        if i >= 0:
            j = buf.find("\n", i)
            if j < 0:
                return  # the marker's line is not all there yet
            text, tail = buf[:i], buf[i + len(run.mark):j].strip()
            run.bufs[name] = ""
            run.ended.add(name)
            if name == "stdout" and tail.isdigit():
                run.status = int(tail)
        else:
            keep = partial_suffix(buf, run.mark)
            text, run.bufs[name] = buf[: len(buf) - keep], buf[len(buf) - keep:]
        if text and not run.silent:
            run.ex.put({"type": name, "text": text, "timestamp": outputs.timestamp({})})
        if len(run.ended) == 2:
            self._run = None
            if run.status != 0:
                run.ex.put(outputs.error("", str(run.status), ""))
            run.ex.put(None)
            run.ex.done = True

    def execute(self, code, silent=False):
        ex = outputs.Execution()
        if not self.alive:
            ex.fail("KernelDied", "bash is not running")
            return ex
        if self._run is not None:  # the context's lock prevents it
            ex.fail("Busy", "bash is running another execution")
            return ex
        if not silent:
            self.count += 1
            ex.put({"type": "number_of_executions", "execution_count": self.count})
        mark = "__tent_ci_" + uuid.uuid4().hex
        path = os.path.join(self.runtime_dir, mark + ".sh")
        with open(path, "w", encoding="utf-8") as f:
            f.write(code + "\n")
        self._run = _Run(ex, mark, silent)
        cmd = (
            f"{{ . {_quote(path)}; }} </dev/null; __tent_ci_rc=$?; rm -f {_quote(path)}; "
            f"printf '%s %d\\n' {mark} $__tent_ci_rc; printf '%s\\n' {mark} >&2\n"
        )
        self.proc.stdin.write(cmd.encode())
        return ex

    async def run_silent(self, code, timeout=60):
        ex = self.execute(code, silent=True)
        try:
            async with asyncio.timeout(timeout):
                while (item := await ex.queue.get()) is not None:
                    if item["type"] == "error" and item["name"]:
                        return f"{item['name']}: {item['value']}"
        except TimeoutError:
            return "timed out"
        return None

    def set_env_code(self, env_vars):
        lines = []
        for k, v in env_vars.items():
            if not _valid_name(k):
                continue
            lines.append(
                f'if [ -n "${{{k}+x}}" ]; then __tent_ci_old_{k}="${k}"; __tent_ci_had_{k}=1; '
                f"else __tent_ci_had_{k}=0; fi; export {k}={_quote(v)}"
            )
        self._env_keys = [k for k in env_vars if _valid_name(k)]
        return "\n".join(lines) or ":"

    def reset_env_code(self):
        lines = [
            f'if [ "$__tent_ci_had_{k}" = 1 ]; then export {k}="$__tent_ci_old_{k}"; '
            f"else unset {k}; fi; unset __tent_ci_old_{k} __tent_ci_had_{k}"
            for k in getattr(self, "_env_keys", [])
        ]
        return "\n".join(lines) or ":"

    def interrupt(self):
        if self.alive:
            kill_group(self.proc.pid, signal.SIGINT)

