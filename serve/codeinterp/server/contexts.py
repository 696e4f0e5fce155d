"""Code contexts of tent's Code Interpreter: a kernel each, one execution at a time."""

import asyncio
import logging
import os
import uuid

import bashkernel
import jskernel
import pykernel
import rkernel

log = logging.getLogger("tent-ci")

KERNELS = {
    "python": pykernel.PythonKernel,
    "bash": bashkernel.BashKernel,
    "javascript": jskernel.JSKernel,
    "typescript": jskernel.TSKernel,
    "r": rkernel.RKernel,
}
POLL = 1.0  # seconds between checks that the client is still there
KEEPALIVE = 5  # polls without output between keepalive lines
INTERRUPT_WAIT = 10.0  # seconds an interrupted execution gets to end


class UnknownLanguage(Exception):
    """No kernel for the language on this host."""


def normalize_language(language):
    """E2B's language names: none is python, js is javascript, ts typescript."""
    if not language:
        return "python"
    language = language.strip().lower()
    return {"js": "javascript", "ts": "typescript"}.get(language, language)


class Context:
    """A code context: an id, a language, a working directory and its kernel."""

    def __init__(self, language, cwd, kernel):
        self.id = str(uuid.uuid4())
        self.language = language
        self.cwd = cwd
        self.kernel = kernel
        self.lock = asyncio.Lock()

    def info(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    async def execute(self, code, env_vars, gone):
        """Runs code; yields output lines (keepalive ones while the kernel is quiet).

        gone() tells whether the client went away: then, or when the caller
        stops iterating, the kernel is interrupted. Per-execution env_vars
        are set before and restored after, in the kernel's order.
        """
        quiet = 0
        while True:  # the context's turn; the client's connection kept alive
            try:
                await asyncio.wait_for(self.lock.acquire(), POLL)
                break
            except asyncio.TimeoutError:
                if gone():
                    return
                quiet += 1
                if quiet >= KEEPALIVE:
                    quiet = 0
                    yield {"type": "keepalive"}
        try:
            if gone():  # the client left while it waited: its code does not run
                log.info("client went away before its turn in context %s", self.id)
                return
            await self.kernel.ready()
            k = self.kernel
            if env_vars:
                err = await k.run_silent(k.set_env_code(env_vars))
                if err:
                    log.warning("setting env vars failed: %s", err)
            ex = k.execute(code)
            try:
                quiet = 0
                while True:
                    try:
                        item = await asyncio.wait_for(ex.queue.get(), POLL)
                    except asyncio.TimeoutError:
                        if gone():
                            log.info("client went away: interrupting context %s", self.id)
                            return
                        quiet += 1
                        if quiet >= KEEPALIVE:
                            quiet = 0
                            yield {"type": "keepalive"}
                        continue
                    if item is None:
                        return
                    quiet = 0
                    yield item
            finally:
                await self._finish(ex, env_vars)
        finally:
            self.lock.release()

    async def _finish(self, ex, env_vars):
        if not ex.done:
            self.kernel.interrupt()
            try:
                async with asyncio.timeout(INTERRUPT_WAIT):
                    while await ex.queue.get() is not None:
                        pass
            except TimeoutError:
                log.warning("context %s: the interrupted execution goes on", self.id)
        if ex.errored and self.kernel.alive and hasattr(self.kernel, "settle"):
            await self.kernel.settle()
        if env_vars and self.kernel.alive:
            err = await self.kernel.run_silent(self.kernel.reset_env_code())
            if err:
                log.warning("restoring env vars failed: %s", err)


class Contexts:
    """All contexts of the server, and the default one of each language."""

    def __init__(self, runtime_dir, env, default_cwd):
        self.runtime_dir = runtime_dir
        self.env = env
        self.default_cwd = default_cwd
        self.by_id = {}
        self.defaults = {}  # language -> context id
        self._default_locks = {}

    def _cwd(self, cwd):
        """The directory to start a kernel in: cwd when it is one, else the default."""
        if cwd and os.path.isdir(cwd) and os.access(cwd, os.X_OK):
            return cwd
        if cwd:
            log.warning("cwd %r is not a directory here: using %s", cwd, self.default_cwd)
        return self.default_cwd

    async def create(self, language, cwd=None):
        language = normalize_language(language)
        cls = KERNELS.get(language)
        if cls is None or not cls.available():
            have = ", ".join(sorted(k for k, c in KERNELS.items() if c.available()))
            raise UnknownLanguage(
                f"Failed to create context: no {language!r} kernel on this host (it has: {have})"
            )
        cwd = self._cwd(cwd)
        kernel = cls(self.runtime_dir, self.env, cwd)
        try:
            await kernel.start()
        except BaseException:
            await kernel.shutdown()
            raise
        ctx = Context(language, cwd, kernel)
        self.by_id[ctx.id] = ctx
        return ctx

    async def default_for(self, language):
        """The default context of language, created on first use."""
        language = normalize_language(language)
        lock = self._default_locks.setdefault(language, asyncio.Lock())
        async with lock:
            ctx = self.by_id.get(self.defaults.get(language))
            if ctx is None:
                ctx = await self.create(language)
                self.defaults[language] = ctx.id
            return ctx

    def get(self, context_id):
        return self.by_id.get(context_id)

    def list(self):
        return [c.info() for c in self.by_id.values()]

    async def restart(self, context_id):
        ctx = self.by_id.get(context_id)
        if ctx is None:
            return False
        await ctx.kernel.restart()
        return True

    async def remove(self, context_id):
        ctx = self.by_id.pop(context_id, None)
        if ctx is None:
            return False
        for lang, cid in list(self.defaults.items()):
            if cid == context_id:
                del self.defaults[lang]
        await ctx.kernel.shutdown()
        return True

    async def close(self):
        ctxs, self.by_id = list(self.by_id.values()), {}
        await asyncio.gather(*(c.kernel.shutdown() for c in ctxs), return_exceptions=True)
