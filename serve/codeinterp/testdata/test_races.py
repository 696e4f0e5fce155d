"""Unit tests of the server's handling of ipykernel's abort window.

Run by serve/codeinterp's TestPythonUnits with the server's directory on
sys.path (they need /usr/bin/python3 with jupyter_client).
"""

import asyncio
import unittest

import outputs
import pykernel


def msg(kind, parent="m1", **content):
    return {"msg_type": kind, "parent_header": {"msg_id": parent}, "content": content}


def drain(ex):
    items = []
    while not ex.queue.empty():
        items.append(ex.queue.get_nowait())
    return items


class ExecutionTest(unittest.TestCase):
    def test_aborted_reply_after_idle_is_an_error(self):
        # iopub's idle may be read before shell's reply: the execution is
        # over only once both came, and an abort is reported as one.
        async def run():
            ex = outputs.Execution()
            self.assertFalse(ex.feed(msg("status", execution_state="busy")))
            self.assertFalse(ex.feed(msg("status", execution_state="idle")))
            self.assertFalse(ex.done)
            self.assertTrue(ex.feed(msg("execute_reply", status="aborted")))
            return ex, drain(ex)

        ex, items = asyncio.run(run())
        self.assertTrue(ex.aborted)
        self.assertEqual([i and i["name"] for i in items], ["ExecutionAborted", None])

    def test_reply_then_idle(self):
        async def run():
            ex = outputs.Execution()
            ex.feed(msg("execute_result", data={"text/plain": "2"}, execution_count=1))
            self.assertFalse(ex.feed(msg("execute_reply", status="ok")))
            self.assertTrue(ex.feed(msg("status", execution_state="idle")))
            return drain(ex)

        items = asyncio.run(run())
        self.assertEqual(items[0]["text"], "2")
        self.assertIsNone(items[-1])


class SettleTest(unittest.TestCase):
    def test_settle_repeats_while_aborted(self):
        # A kernel that aborts the first two no-ops: settle sends a third.
        sent = []

        def execute(code, silent=False):
            ex = outputs.Execution()
            sent.append((code, silent))
            ex.feed(msg("execute_reply", status="aborted" if len(sent) <= 2 else "ok"))
            ex.feed(msg("status", execution_state="idle"))
            return ex

        k = pykernel.PythonKernel("/nonexistent", {}, "/")
        k.execute = execute
        asyncio.run(k.settle())
        self.assertEqual(sent, [("pass", True)] * 3)


class MarkedEndTest(unittest.TestCase):
    def test_stdout_text_waiting_for_room_comes_before_the_end(self):
        # stdout's last text waits for room in a full queue while stderr's
        # marker arrives: the execution must not end before that text.
        import jskernel
        import kernelbase

        async def run():
            k = jskernel.JSKernel("/nonexistent", {}, "/")
            ex = kernelbase.StreamedExecution()
            ex.queue = kernelbase._Queue(1)
            await ex.queue.put({"type": "stdout", "text": "first"})  # the queue is full
            r = kernelbase.MarkedRun(ex, "MARK", False)
            k._run = r
            r.bufs["stdout"] = 'last\nMARK{"text": "v"}\n'
            r.bufs["stderr"] = "MARK\n"
            out = asyncio.ensure_future(k._drain(None, r, "stdout"))  # waits for room
            await asyncio.sleep(0)
            await k._drain(None, r, "stderr")
            items = []
            while (item := await ex.queue.get()) is not None:
                items.append(item.get("text"))
            await out
            return items

        self.assertEqual(asyncio.run(run()), ["first", "last\n", "v"])

    def test_bash_status(self):
        # bash's stdout marker carries the status: non-zero is an error,
        # except for silent helper code; a split marker is held back.
        import bashkernel
        import kernelbase

        async def run(status, silent):
            k = bashkernel.BashKernel("/nonexistent", {}, "/")
            ex = kernelbase.StreamedExecution()
            r = kernelbase.MarkedRun(ex, "MARK", silent)
            k._run = r
            r.bufs["stdout"] = "out\nMA"
            await k._drain(None, r, "stdout")
            self.assertEqual(r.bufs["stdout"], "MA")
            r.bufs["stdout"] += f"RK {status}\n"
            await k._drain(None, r, "stdout")
            r.bufs["stderr"] = "MARK\n"
            await k._drain(None, r, "stderr")
            items = []
            while (item := await ex.queue.get()) is not None:
                items.append((item["type"], item.get("text") or item.get("value")))
            return items

        self.assertEqual(asyncio.run(run(0, False)), [("stdout", "out\n")])
        self.assertEqual(asyncio.run(run(3, False)), [("stdout", "out\n"), ("error", "3")])
        self.assertEqual(asyncio.run(run(3, True)), [])


if __name__ == "__main__":
    unittest.main()
