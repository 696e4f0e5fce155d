// Package codeinterp holds tent's server for E2B's Code Interpreter API, the
// service of the built-in code-interpreter-v1 template.
//
// The server is a Python program (server/main.py) that tent starts inside
// the sandbox with the host's /usr/bin/python3 and Debian packages
// (python3-ipykernel, python3-jupyter-client, tornado; numpy, pandas,
// matplotlib and PIL for the kernels). It listens on port 49999 and speaks
// what E2B's SDKs send there: GET /health, POST /execute (a stream of JSON
// lines: number_of_executions, stdout, stderr, result, error, keepalive,
// end_of_execution), and /contexts to create, list, restart and delete code
// contexts. Python contexts are IPython kernels started by the server with
// start-up code (server/kstartup.py) that adds E2B's "e2b/data" (DataFrame)
// and "e2b/chart" (matplotlib figure, server/kcharts.py) display formats;
// R contexts are IRkernel (server/rkernel.py), driven as the Python kernel
// is (server/jupyterkernel.py); bash contexts are a persistent bash
// process, javascript contexts a persistent node process
// (server/jskernel.py), and typescript contexts the same, each cell
// transpiled by the host's typescript module. Kernels run as the sandbox's
// processes, under its limits, and inherit its environment.
package codeinterp
