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
import os
import shutil
import signal

import outputs
import kernelbase
from kernelbase import KernelError, die_with_parent, kill_group


def _quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


def _valid_name(k):
    return k and (k[0].isalpha() or k[0] == "_") and all(c.isalnum() or c == "_" for c in k)


class BashKernel(kernelbase.MarkedKernel):
    """One bash process that runs a context's executions in turn."""

    language = "bash"
    program = "bash"

    @staticmethod
    def available():
        return shutil.which("bash") is not None

    async def start(self):
        try:
            proc = await asyncio.create_subprocess_exec(
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
        proc.stdin.write(b"trap : INT\n")
        self._begin(proc)

    def execute(self, code, silent=False):
        ex, run = self._new_run(silent)
        if run is None:
            return ex
        path = os.path.join(self.runtime_dir, run.mark + ".sh")
        with open(path, "w", encoding="utf-8") as f:
            f.write(code + "\n")
        cmd = (
            f"{{ . {_quote(path)}; }} </dev/null; __tent_ci_rc=$?; rm -f {_quote(path)}; "
            f"printf '%s %d\\n' {run.mark} $__tent_ci_rc; printf '%s\\n' {run.mark} >&2\n"
        )
        self.proc.stdin.write(cmd.encode())
        return ex

    def _end_lines(self, run):
        # A non-zero status is an error (none for silent helper code).
        status = run.tails.get("stdout", "").strip()
        if status.isdigit() and int(status) != 0 and not run.silent:
            return [outputs.error("", status, "")]
        return []

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

