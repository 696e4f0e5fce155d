"""What the server's Jupyter kernels share (Python's ipykernel, R's IRkernel).

The server starts each kernel itself, with a connection file over ipc
sockets in its private runtime directory, talks to it with jupyter_client,
and turns the kernel's messages into the output lines of E2B's /execute. A
kernel that dies is started again on the context's next execution. A
subclass gives the kernel's command line, its start-up code, its no-op and
its env var code.
"""

import asyncio
import logging
import os
import signal
import uuid

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.connect import write_connection_file

import kernelbase
import outputs
from kernelbase import KernelError, die_with_parent

log = logging.getLogger("tent-ci")

READY_TIMEOUT = 120  # seconds for a new kernel to answer and run its start-up code
SETTLE_TRIES = 100  # no-ops sent at most to wait out an abort window


class JupyterKernel(kernelbase.ProcessKernel):
    """One Jupyter kernel process and the client that talks to it.

    A subclass sets language and NOOP (code that does nothing), and gives
    available(), command(conn_file), startup_code() (silent code run once
    per kernel, or None), set_env_code(env_vars) and reset_env_code().
    """

    language = ""
    NOOP = ""
    SILENT_TIMEOUT = READY_TIMEOUT

    def __init__(self, runtime_dir, env, cwd):
        self.runtime_dir = runtime_dir
        self.env = env
        self.cwd = cwd
        self.proc = None
        self.client = None
        self._pending = {}  # msg_id -> outputs.Execution
        self._tasks = []
        self._starting = None
        self._conn_file = None
        self._closing = False

    def start(self):
        """Starts the kernel in the background; execute() waits for it."""
        self._starting = asyncio.ensure_future(self._start())
        return self._starting

    async def _start(self):
        name = "k-" + uuid.uuid4().hex[:12]
        conn = os.path.join(self.runtime_dir, name + ".json")
        write_connection_file(
            conn,
            ip=os.path.join(self.runtime_dir, name),
            transport="ipc",
            key=uuid.uuid4().hex.encode(),
        )
        self._conn_file = conn
        cmd = self.command(conn)
        self.proc = await asyncio.create_subprocess_exec(
            *cmd,
            cwd=self.cwd,
            env=self.env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            preexec_fn=die_with_parent,
            process_group=0,
        )
        client = AsyncKernelClient()
        client.load_connection_file(conn)
        client.start_channels(shell=True, iopub=True, stdin=False, hb=False, control=False)
        self.client = client
        proc = self.proc
        self._tasks = [asyncio.ensure_future(self._watch(proc))]
        try:
            await asyncio.wait_for(client.wait_for_ready(), READY_TIMEOUT)
        except (asyncio.TimeoutError, RuntimeError) as e:
            raise KernelError(f"the {self.language} kernel did not start: {e!r}") from e
        self._tasks += [
            asyncio.ensure_future(self._read(client.iopub_channel)),
            asyncio.ensure_future(self._read(client.shell_channel)),
        ]
        code = self.startup_code()
        err = await self.run_silent(code) if code else None
        if err:
            log.error("kernel start-up code failed: %s", err)

    @property
    def alive(self):
        return self.proc is not None and self.proc.returncode is None

    async def ready(self):
        """Waits for the kernel to be started; restarts it when it has died."""
        if self._starting is None or (self._starting.done() and not self.alive and not self._closing):
            await self.restart()
        await self._starting

    async def _read(self, channel):
        while True:
            try:
                msg = await channel.get_msg()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # closed socket, or a message that fails to parse
                if self.client is None or not channel.is_alive():
                    return
                log.warning("kernel message dropped: %s", e)
                await asyncio.sleep(0.1)  # no hot loop on a socket that keeps failing
                continue
            parent = msg.get("parent_header", {}).get("msg_id")
            ex = self._pending.get(parent)
            if ex is not None and ex.feed(msg):
                self._pending.pop(parent, None)

    async def _watch(self, proc):
        code = await proc.wait()
        if self.proc is not proc:
            return
        why = "ContextRestarting" if self._closing else "KernelDied"
        value = (
            "Context was restarted"
            if self._closing
            else f"the kernel exited (status {code}); the next execution starts a new one"
        )
        if not self._closing:
            log.warning("%s kernel %d exited with status %s", self.language, proc.pid, code)
        self._fail_pending(why, value)

    def _fail_pending(self, name, value):
        for ex in list(self._pending.values()):
            ex.fail(name, value)
        self._pending.clear()

    def execute(self, code, silent=False):
        """Sends code to the kernel; the returned Execution's queue gets its outputs."""
        ex = outputs.Execution()
        if not self.alive or self.client is None:
            ex.fail("KernelDied", "the kernel is not running")
            return ex
        msg_id = self.client.execute(
            code,
            silent=silent,
            store_history=not silent,
            allow_stdin=False,
            stop_on_error=not silent,
        )
        self._pending[msg_id] = ex
        return ex

    async def settle(self):
        """Waits out the kernel's abort window after an error.

        After an execution that failed (an interrupt too), ipykernel aborts
        every execute request that reaches it before it has handled its own
        "stop aborting" event: a next execution sent at once would be
        aborted without running. A silent no-op, repeated while it is
        aborted (bounded), lets the window pass before the context's next
        execution or the restoring of its env vars.
        """
        try:
            async with asyncio.timeout(READY_TIMEOUT):
                for _ in range(SETTLE_TRIES):
                    ex = self.execute(self.NOOP, silent=True)
                    while await ex.queue.get() is not None:
                        pass
                    if not ex.aborted:
                        return
                    await asyncio.sleep(0.01)
        except TimeoutError:
            log.warning("the kernel did not answer a no-op after an error")

    def interrupt(self):
        if self.alive:
            try:
                os.kill(self.proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass

    def _fail(self, name, value):
        self._fail_pending(name, value)

    def _release(self):
        if self.client is not None:
            self.client.stop_channels()
        self.client = None
        if self._conn_file:
            _remove_kernel_files(self._conn_file)

    async def restart(self):
        """Kills the kernel (a running execution ends with ContextRestarting) and starts a new one."""
        if self._starting is not None and not self._starting.done():
            try:
                await self._starting
            except Exception:
                pass
        await super().restart()


def _remove_kernel_files(conn_file):
    prefix = conn_file[: -len(".json")]
    d = os.path.dirname(conn_file)
    for name in os.listdir(d):
        p = os.path.join(d, name)
        if p == conn_file or p.startswith(prefix + "-"):
            try:
                os.unlink(p)
            except OSError:
                pass
