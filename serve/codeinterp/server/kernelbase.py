"""What the server's kernels share: each runs as a process group of its own,
stopped, restarted and shut down the same way, and dies with the server.

The kernels of tent's own (bash, JavaScript) are one process that runs a
context's executions in turn, each ended by a marker line on stdout and on
stderr: MarkedKernel reads both streams, passes on what comes before the
markers with backpressure (a client that reads slowly stops the kernel's
process, not the server's memory) and ends the execution once both markers
came.
"""

import asyncio
import codecs
import ctypes
import logging
import os
import signal
import uuid

import outputs

log = logging.getLogger("tent-ci")

CHUNK = 65536  # bytes read from a kernel's stream at once
QUEUE_ITEMS = 32  # chunks of output held for a slow client: 2 MiB at most
MAX_MARK_LINE = 4 << 20  # bytes of a marker line (the JavaScript driver clips results at 1 MiB)


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


class StreamedExecution:
    """The output lines of one execution of a MarkedKernel, then None (see
    outputs.Execution); put waits while QUEUE_ITEMS lines are unread."""

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
        self.end(outputs.error(name, value, ""))


class MarkedRun:
    """The execution a MarkedKernel runs: its marker, what is left to read of
    each stream, and the rest of each stream's marker line once it came."""

    def __init__(self, ex, mark, silent):
        self.ex, self.mark, self.silent = ex, mark, silent
        self.bufs = {"stdout": "", "stderr": ""}
        self.tails = {}


class MarkedKernel(ProcessKernel):
    """A kernel process whose executions end with marker lines (see above).

    A subclass names its program, gives start() (which calls _begin with the
    new process), execute() (which takes a run from _new_run, then sends the
    code with its marker) and _end_lines(run), the lines that end an
    execution once both markers came (from run.tails).
    """

    program = "the kernel"

    def __init__(self, runtime_dir, env, cwd):
        self.runtime_dir, self.env, self.cwd = runtime_dir, env, cwd
        self.proc = None
        self.count = 0
        self._run = None
        self._tasks = []
        self._closing = False
        self._killed = None  # why the server killed the process, if it did

    @property
    def alive(self):
        return self.proc is not None and self.proc.returncode is None

    async def ready(self):
        if not self.alive and not self._closing:
            await self.restart()

    def _begin(self, proc):
        """Starts reading a new process; it counts executions from 1, as a new Jupyter kernel."""
        self.proc, self._killed, self.count = proc, None, 0
        self._tasks = [
            asyncio.ensure_future(self._read(proc, "stdout")),
            asyncio.ensure_future(self._read(proc, "stderr")),
            asyncio.ensure_future(self._watch(proc)),
        ]

    def _new_run(self, silent):
        """A new execution, and its run unless it failed at once (then None)."""
        ex = StreamedExecution()
        if not self.alive:
            ex.fail("KernelDied", f"{self.program} is not running")
            return ex, None
        if self._run is not None:  # the context's lock prevents it
            ex.fail("Busy", f"{self.program} is running another execution")
            return ex, None
        if not silent:
            self.count += 1
            ex.queue.put_final({"type": "number_of_executions", "execution_count": self.count})
        self._run = MarkedRun(ex, "__tent_ci_" + uuid.uuid4().hex, silent)
        return ex, self._run

    async def _watch(self, proc):
        code = await proc.wait()
        if proc is not self.proc or self._closing:
            return
        if self._killed:
            self._fail("KernelDied", self._killed)
        else:
            log.warning("%s %d exited with status %s", self.program, proc.pid, code)
            self._fail(
                "KernelDied",
                f"{self.program} exited (status {code}): the context's state is lost; "
                f"the next execution starts a new {self.program}",
            )

    def _fail(self, name, value):
        run, self._run = self._run, None
        if run is not None:
            run.ex.fail(name, value)

    def _kill(self, proc, why):
        log.warning("context's %s %d killed: %s", self.program, proc.pid, why)
        self._killed = why
        kill_group(proc.pid, signal.SIGKILL)

    async def _read(self, proc, name):
        stream = getattr(proc, name)
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
            await self._drain(proc, run, name)

    async def _drain(self, proc, run, name):
        buf = run.bufs[name]
        i = buf.find(run.mark)
        if i >= 0:
            j = buf.find("\n", i)
            if j < 0:
                if len(buf) - i > MAX_MARK_LINE:
                    self._kill(proc, f"{self.program}'s marker line was too long: it was restarted")
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
        run.tails[name] = tail
        if len(run.tails) == 2 and self._run is run:
            self._run = None
            run.ex.end(*self._end_lines(run))

    def _end_lines(self, run):
        """The lines that end run's execution (a result, an error), if any."""
        return []
