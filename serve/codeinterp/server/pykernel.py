"""A Python (IPython) kernel of tent's Code Interpreter server.

ipykernel, started as python3 -m ipykernel_launcher with the server's own
interpreter; its start-up code (kstartup.py) adds E2B's display formats, and
env vars are pushed and popped there too. The rest is jupyterkernel.py's.
"""

import importlib.util
import os
import sys

import jupyterkernel

HERE = os.path.dirname(os.path.abspath(__file__))


def bootstrap_code():
    """Silent code that loads kstartup.py as module _tent_ci_startup and installs it."""
    src = (
        "import importlib.util as u, sys\n"
        "from IPython import get_ipython\n"
        f"s = u.spec_from_file_location('_tent_ci_startup', {os.path.join(HERE, 'kstartup.py')!r})\n"
        "m = u.module_from_spec(s)\n"
        "sys.modules['_tent_ci_startup'] = m\n"
        "b, sys.dont_write_bytecode = sys.dont_write_bytecode, True\n"
        "s.loader.exec_module(m)\n"
        "sys.dont_write_bytecode = b\n"
        f"m.install(get_ipython(), {HERE!r})\n"
    )
    return f"exec({src!r}, {{}})"


class PythonKernel(jupyterkernel.JupyterKernel):
    """One IPython kernel process and the client that talks to it."""

    language = "python"
    NOOP = "pass"

    @staticmethod
    def available():
        return importlib.util.find_spec("ipykernel") is not None

    def command(self, conn):
        return [
            sys.executable, "-m", "ipykernel_launcher", "-f", conn,
            "--InteractiveShell.colors=NoColor",
            "--PlainTextFormatter.max_seq_length=0",
            "--HistoryManager.hist_file=:memory:",
        ]

    def startup_code(self):
        return bootstrap_code()

    def set_env_code(self, env_vars):
        return f"__import__('_tent_ci_startup').env_push({dict(env_vars)!r})"

    def reset_env_code(self):
        return "__import__('_tent_ci_startup').env_pop()"
