"""Drives tent serve's built-in code-interpreter-v1 template with the
official, unmodified e2b-code-interpreter Python SDK (pinned by
serve/codeinterp_sdk_test.go, which starts the server and sets
E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY: a Python agent's way in,
no code change). Every call's outcome is asserted; one line per step;
non-zero exit if any failed. WORK is a host directory for the chart.
"""

import base64
import os
import sys
import threading
import time
import traceback

from e2b_code_interpreter import Sandbox
from e2b.exceptions import TimeoutException

failures = 0
ran = 0


def step(name, fn):
    global failures, ran
    ran += 1
    t0 = time.monotonic()
    try:
        fn()
        print(f"ok   {name} ({(time.monotonic() - t0) * 1000:.0f} ms)", flush=True)
    except Exception:
        failures += 1
        print(f"FAIL {name} ({(time.monotonic() - t0) * 1000:.0f} ms): {traceback.format_exc()}", flush=True)


def eq(got, want, what):
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


def text(ex, what):
    if ex.error:
        raise AssertionError(f"{what}: {ex.error.name}: {ex.error.value}")
    return ex.text


sbx = Sandbox.create(timeout=300)
try:

    def stateful():
        eq(text(sbx.run_code("x = 41; x + 1"), "first"), "42", "x + 1")
        eq(text(sbx.run_code("x += 1; x"), "second"), "42", "x after +=")

    step("stateful", stateful)

    def csv_chart():
        sbx.files.write("/home/user/sales.csv", "month,sales\nJan,120\nFeb,150\nMar,90\nApr,180\n")
        ex = sbx.run_code(
            "import pandas as pd\nimport matplotlib.pyplot as plt\n"
            "df = pd.read_csv('/home/user/sales.csv')\n"
            "fig, ax = plt.subplots(); ax.plot(df['month'], df['sales']); ax.set_title('Sales')\n"
            "plt.show()\nint(df['sales'].sum())"
        )
        eq(text(ex, "the chart's cell"), "540", "the sum")
        charts = [r for r in ex.results if r.png]
        eq(len(charts), 1, "PNG results")
        png = base64.b64decode(charts[0].png)
        eq(png[:8], b"\x89PNG\r\n\x1a\n", "the PNG's signature")
        with open(os.path.join(os.environ["WORK"], "chart.png"), "wb") as f:
            f.write(png)
        chart = charts[0].chart
        eq((chart.type.value if chart else None, chart.title if chart else None), ("line", "Sales"), "the chart")

    step("csv and chart", csv_chart)

    def streams_and_errors():
        out = []
        ex = sbx.run_code("print('to stdout')\n1/0", on_stdout=lambda m: out.append(m.line))
        eq(out, ["to stdout\n"], "on_stdout")
        eq(ex.error.name if ex.error else None, "ZeroDivisionError", "the error")

    step("streams and errors", streams_and_errors)

    def envs():
        eq(text(sbx.run_code("import os; os.environ.get('TENT_V')", envs={"TENT_V": "set"}), "with"), "set", "env var")
        eq(text(sbx.run_code("import os; os.environ.get('TENT_V', 'gone')"), "after"), "gone", "env var after")

    step("env vars per execution", envs)

    def loop_and_other_context():
        busy = sbx.create_code_context()
        got = {}

        def loop():
            try:
                sbx.run_code("while True: pass", context=busy, timeout=3)
                got["loop"] = "returned"
            except TimeoutException:
                got["loop"] = "timeout"

        th = threading.Thread(target=loop)
        th.start()
        time.sleep(0.5)
        other = sbx.create_code_context()
        eq(text(sbx.run_code("6 * 7", context=other), "the other context"), "42", "while the loop runs")
        th.join(60)
        eq(got.get("loop"), "timeout", "the loop")
        eq(text(sbx.run_code("'alive'", context=busy), "after the interrupt"), "alive", "the looping context")

    step("infinite loop and another context", loop_and_other_context)

    def confinement():
        ex = sbx.run_code("import os\ntry:\n    open('/usr/bin/tent-owned', 'w')\nexcept OSError as e:\n    print(e.errno)")
        eq(ex.logs.stdout, ["30\n"], "writing /usr (EROFS)")

    step("confinement", confinement)
finally:
    sid = sbx.sandbox_id
    sbx.kill()

    def killed():
        eq([s for s in Sandbox.list().next_items() if s.sandbox_id == sid], [], "listed after kill")

    step("kill", killed)

print(f"{ran} steps, {failures} failed")
sys.exit(1 if failures else 0)
