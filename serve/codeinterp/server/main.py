"""tent's Code Interpreter server: E2B's Code Interpreter API over Jupyter kernels.

Run by tent inside a sandbox of the code-interpreter-v1 template as
/usr/bin/python3 main.py. It starts a default Python kernel, then listens on
0.0.0.0:49999 ($TENT_CI_PORT overrides), so that a port that accepts means a
server ready to run code. Kernels' connection files, IPython's and
matplotlib's directories live in a private directory under /tmp (0700),
removed at exit. Uses only the standard library and the host's Debian
packages: tornado, jupyter_client, ipykernel.
"""

import asyncio
import logging
import os
import shutil
import signal
import sys
import tempfile

sys.dont_write_bytecode = True  # the server's directory may be read-only, or embedded
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import api  # noqa: E402
import contexts  # noqa: E402

log = logging.getLogger("tent-ci")

DEFAULT_PORT = 49999
MAX_BODY = 64 << 20


def default_cwd():
    """E2B's /home/user when there is one, else the sandbox's working directory, else $HOME."""
    for d in (os.environ.get("TENT_CI_CWD"), "/home/user", os.getcwd(), os.environ.get("HOME")):
        if d and os.path.isdir(d):
            return d
    return "/"


def kernel_env(runtime_dir):
    """The kernels' environment: the sandbox's, with writable dirs for IPython and matplotlib."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENT_CI_")}
    for var, sub in (("MPLCONFIGDIR", "matplotlib"), ("IPYTHONDIR", "ipython")):
        cur = env.get(var)
        if not cur or not os.access(cur, os.W_OK):
            path = os.path.join(runtime_dir, sub)
            os.makedirs(path, mode=0o700, exist_ok=True)
            env[var] = path
    env["JUPYTER_RUNTIME_DIR"] = runtime_dir
    env.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    env["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"
    return env


async def serve(port, runtime_dir):
    ctxs = contexts.Contexts(runtime_dir, kernel_env(runtime_dir), default_cwd())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        # Ready before the port accepts. As E2B's server, the default
        # JavaScript context exists from the start (listed by GET
        # /contexts) where the host has node; both kernels start at once.
        languages = ["python"]
        if contexts.KERNELS["javascript"].available():
            languages.append("javascript")
        for ctx in await asyncio.gather(*(ctxs.default_for(lang) for lang in languages)):
            log.info("default %s context %s in %s", ctx.language, ctx.id, ctx.cwd)
        server = api.make_app(ctxs).listen(
            port, address="0.0.0.0", max_body_size=MAX_BODY, idle_connection_timeout=640
        )
        log.info("listening on 0.0.0.0:%d", port)
        await stop.wait()
        server.stop()
    finally:
        await ctxs.close()


def main():
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="tent-ci: %(levelname)s %(message)s"
    )
    port = int(os.environ.get("TENT_CI_PORT") or DEFAULT_PORT)
    # tent's bootstrap names a directory of its own, emptied at each start,
    # so that a server killed with its kernels leaves nothing behind for
    # long; run by hand, a fresh one (mode 0700).
    runtime_dir = os.environ.pop("TENT_CI_RUNTIME", "")
    if runtime_dir:
        shutil.rmtree(runtime_dir, ignore_errors=True)
        os.mkdir(runtime_dir, 0o700)
    else:
        runtime_dir = tempfile.mkdtemp(prefix="tent-ci-")
    try:
        asyncio.run(serve(port, runtime_dir))
    finally:
        shutil.rmtree(runtime_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
