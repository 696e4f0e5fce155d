"""An R kernel of tent's Code Interpreter server: IRkernel (Debian's r-cran-irkernel).

It is started from its Jupyter kernel spec (ir/kernel.json in the system's
Jupyter data directories: R --slave -e 'IRkernel::main()' --args
{connection_file}) in the context's working directory, with R from
/usr/bin or /usr/local/bin, and driven as every Jupyter kernel is
(jupyterkernel.py). Its start-up code attaches "tent:ci", an environment
whose push() and pop() set a cell's env vars (Sys.setenv) and restore what
was there before (Sys.setenv, Sys.unsetenv). IRkernel gives a cell's value
as display_data, so R results are not main results, as with E2B's server.
"""

import json
import os
import shutil

import jupyterkernel

SPEC_DIRS = ("/usr/share/jupyter/kernels/ir", "/usr/local/share/jupyter/kernels/ir")
R_PATH = "/usr/bin:/usr/local/bin"  # the host's R, not a user's

STARTUP = r"""local({
  e <- new.env()
  stack <- list()
  e$push <- function(vars) {
    stack <<- c(list(Sys.getenv(names(vars), unset = NA, names = TRUE)), stack)
    do.call(Sys.setenv, as.list(vars))
    invisible(NULL)
  }
  e$pop <- function() {
    if (!length(stack)) return(invisible(NULL))
    old <- stack[[1]]
    stack <<- stack[-1]
    if (any(is.na(old))) Sys.unsetenv(names(old)[is.na(old)])
    if (any(!is.na(old))) do.call(Sys.setenv, as.list(old[!is.na(old)]))
    invisible(NULL)
  }
  attach(e, name = "tent:ci", warn.conflicts = FALSE)
})"""


def r_string(s):
    """s as an R string literal: printable ASCII as is, the rest escaped."""
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            out.append("\\U{%x}" % ord(ch))
    return '"' + "".join(out) + '"'


def kernel_argv():
    """The IR kernel spec's argv, its R resolved in R_PATH; None without one."""
    for d in SPEC_DIRS:
        try:
            with open(os.path.join(d, "kernel.json"), encoding="utf-8") as f:
                argv = json.load(f).get("argv")
        except (OSError, ValueError, AttributeError):
            continue
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            continue
        exe = argv[0] if os.path.isabs(argv[0]) else shutil.which(argv[0], path=R_PATH)
        if exe and os.access(exe, os.X_OK):
            return [exe] + argv[1:]
    return None


class RKernel(jupyterkernel.JupyterKernel):
    """One IRkernel process and the client that talks to it."""

    language = "r"
    NOOP = "invisible(NULL)"

    @staticmethod
    def available():
        return kernel_argv() is not None

    def command(self, conn):
        argv = kernel_argv()
        if argv is None:
            raise jupyterkernel.KernelError("there is no R kernel (IRkernel) on this host")
        return [conn if a == "{connection_file}" else a for a in argv]

    def startup_code(self):
        return STARTUP

    def set_env_code(self, env_vars):
        pairs = ", ".join(f"{r_string(k)} = {r_string(v)}" for k, v in env_vars.items())
        return f'as.environment("tent:ci")$push(c({pairs}))'

    def reset_env_code(self):
        return 'as.environment("tent:ci")$pop()'
