"""Jupyter messages to the output lines of E2B's /execute stream.

Each line is a JSON object with a "type": number_of_executions, stdout,
stderr, result, error (then keepalive and end_of_execution, which the HTTP
layer adds). A result carries every MIME form the kernel gave under the names
of E2B's SDKs (text, html, markdown, svg, png, jpeg, pdf, latex, json,
javascript, data, chart), the rest in extra, and is_main_result.
"""

import asyncio
import datetime

# MIME type -> result field, in the order E2B's server writes them.
FORMS = (
    ("text/plain", "text"),
    ("text/html", "html"),
    ("text/markdown", "markdown"),
    ("image/svg+xml", "svg"),
    ("image/png", "png"),
    ("image/jpeg", "jpeg"),
    ("application/pdf", "pdf"),
    ("text/latex", "latex"),
    ("application/json", "json"),
    ("application/javascript", "javascript"),
    ("e2b/data", "data"),
    ("e2b/chart", "chart"),
)


def timestamp(msg):
    """The message's date as ISO 8601 text (now when it has none)."""
    date = msg.get("header", {}).get("date")
    if isinstance(date, datetime.datetime):
        return date.isoformat()
    if isinstance(date, str) and date:
        return date
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def result(data, is_main):
    """A result line from a MIME bundle."""
    data = dict(data or {})
    out = {"type": "result"}
    for mime, field in FORMS:
        if mime in data:
            value = data.pop(mime)
            if field == "text" and isinstance(value, str) and len(value) >= 2:
                # E2B's SDKs get a string result without its repr quotes.
                if value[0] == value[-1] and value[0] in "'\"":
                    value = value[1:-1]
            if value is not None:
                out[field] = value
    out["extra"] = data
    out["is_main_result"] = is_main
    return out


def error(name, value, traceback):
    return {"type": "error", "name": name, "value": value, "traceback": traceback}


class Execution:
    """The outputs of one execute_request: a queue of lines, then None."""

    def __init__(self):
        self.queue = asyncio.Queue()
        self.errored = False
        self.done = False

    def put(self, item):
        if not self.done:
            self.queue.put_nowait(item)

    def fail(self, name, value):
        """Ends the execution with an error line (the kernel died or restarted)."""
        if not self.done:
            if not self.errored:
                self.put(error(name, value, ""))
            self.errored = True
            self.put(None)
            self.done = True

    def feed(self, msg):
        """Handles one kernel message; True once the execution is over."""
        kind = msg.get("msg_type") or msg.get("header", {}).get("msg_type")
        content = msg.get("content", {})
        if kind == "stream":
            name = content.get("name")
            if name in ("stdout", "stderr"):
                self.put({"type": name, "text": content.get("text", ""), "timestamp": timestamp(msg)})
        elif kind == "execute_input":
            self.put({"type": "number_of_executions", "execution_count": content.get("execution_count")})
        elif kind in ("execute_result", "display_data"):
            self.put(result(content.get("data"), kind == "execute_result"))
        elif kind == "error" or (kind == "execute_reply" and content.get("status") == "error"):
            if not self.errored:
                self.errored = True
                tb = content.get("traceback") or []
                self.put(error(content.get("ename", ""), content.get("evalue", ""), "\n".join(tb)))
        elif kind == "execute_reply" and content.get("status") == "aborted":
            if not self.errored:
                self.errored = True
                self.put(error("ExecutionAborted", "Execution was aborted", ""))
        elif kind == "status" and content.get("execution_state") == "idle":
            self.put(None)
            self.done = True
            return True
        return False
