"""What the server's kernels share: each runs as a process group of its own,
stopped, restarted and shut down the same way, and dies with the server."""

import asyncio
import ctypes
import os
import signal


class KernelError(Exception):
    """A kernel could not be started or did not answer."""


def die_with_parent():
    """preexec_fn: the kernel gets SIGKILL when the server dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def kill_group(pid, sig=signal.SIGKILL):
    """Signals the process group pid leads; one already gone is no error."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def partial_suffix(buf, mark):
    """How many chars at the end of buf could begin mark."""
    for n in range(min(len(mark) - 1, len(buf)), 0, -1):
        if mark.startswith(buf[-n:]):
            return n
    return 0


class ProcessKernel:
    """The lifecycle of a kernel process.

    A subclass sets self.proc (an asyncio subprocess that leads its own
    process group), self._tasks (the tasks reading it) and self._closing,
    and gives start(), execute(code, silent) (an execution whose queue
    ends with None) and _fail(name, value), which ends the running
    execution with an error; it may extend _release().
    """

    SILENT_TIMEOUT = 60  # seconds for helper code (env vars) to run

    async def run_silent(self, code, timeout=None):
        """Runs helper code silently; returns its error line, or None."""
        ex = self.execute(code, silent=True)
        err = None
        try:
            async with asyncio.timeout(timeout or self.SILENT_TIMEOUT):
                while (item := await ex.queue.get()) is not None:
                    if item["type"] == "error":
                        err = f"{item['name']}: {item['value']}"
        except TimeoutError:
            return "timed out"
        return err

    async def _stop(self):
        proc = self.proc
        if proc is not None and proc.returncode is None:
            kill_group(proc.pid)
            await proc.wait()
        self._fail("ContextRestarting", "Context was restarted")
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        self._release()

    def _release(self):
        """Frees what the kernel holds beside its process (nothing here)."""

    async def restart(self):
        """Kills the kernel (a running execution ends with ContextRestarting) and starts a new one."""
        self._closing = True
        try:
            await self._stop()
        finally:
            self._closing = False
        await self.start()

    async def shutdown(self):
        self._closing = True
        await self._stop()
