"""HTTP API of tent's Code Interpreter: what E2B's SDKs speak on port 49999.

GET /health; POST /execute (a stream of JSON lines); POST and GET /contexts;
POST /contexts/{id}/restart; DELETE /contexts/{id}. Status codes as E2B's
server: 400 when both context_id and language are given, 404 for an unknown
context, 422 for a malformed body, 500 when a context cannot be created.
"""

import json
import logging
import socket

import tornado.iostream
import tornado.web

import outputs

log = logging.getLogger("tent-ci")


class Base(tornado.web.RequestHandler):
    def initialize(self, contexts):
        self.contexts = contexts

    def set_default_headers(self):
        self.set_header("Access-Control-Allow-Origin", "*")

    def options(self, *args):
        self.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS")
        self.set_header(
            "Access-Control-Allow-Headers",
            self.request.headers.get("Access-Control-Request-Headers", "*"),
        )
        self.set_status(204)

    def send_json(self, value, status=200):
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(value))

    def send_text(self, text, status):
        self.set_status(status)
        self.set_header("Content-Type", "text/plain; charset=utf-8")
        self.finish(text)

    def invalid(self, where, msg):
        """422 with a body shaped like FastAPI's, as E2B's server answers."""
        self.send_json({"detail": [{"loc": ["body"] + where, "msg": msg, "type": "value_error"}]}, 422)

    def body(self):
        """The request's JSON object, or None after answering 422."""
        try:
            value = json.loads(self.request.body or b"null")
        except ValueError as e:
            self.invalid([], f"invalid JSON: {e}")
            return None
        if not isinstance(value, dict):
            self.invalid([], "the body must be a JSON object")
            return None
        return value

    def optional_str(self, body, key):
        """body[key] when a string or absent (None); False after answering 422."""
        v = body.get(key)
        if v is None or isinstance(v, str):
            return v
        self.invalid([key], "must be a string")
        return False


class Health(Base):
    def get(self):
        self.send_json("OK")


class Execute(Base):
    def on_connection_close(self):
        self._closed = True

    def gone(self):
        """Whether the client closed the connection (peeks at the socket)."""
        if getattr(self, "_closed", False):
            return True
        stream = getattr(self.request.connection, "stream", None)
        sock = getattr(stream, "socket", None)
        if stream is None or stream.closed() or sock is None:
            return True
        try:
            return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    async def post(self):
        body = self.body()
        if body is None:
            return
        code = body.get("code")
        if not isinstance(code, str):
            return self.invalid(["code"], "code is required and must be a string")
        context_id = self.optional_str(body, "context_id")
        language = self.optional_str(body, "language")
        if context_id is False or language is False:
            return
        env_vars = body.get("env_vars") or {}
        if not isinstance(env_vars, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items()
        ):
            return self.invalid(["env_vars"], "env_vars must map strings to strings")
        if any(not k or "=" in k or "\0" in k or "\0" in v for k, v in env_vars.items()):
            return self.invalid(["env_vars"], "not a valid environment variable")
        if context_id and language:
            return self.send_text("Only one of context_id or language can be provided", 400)
        if context_id:
            ctx = self.contexts.get(context_id)
            if ctx is None:
                return self.send_text(f"Context {context_id} not found", 404)
        else:
            try:
                ctx = await self.contexts.default_for(language)
            except Exception as e:
                return self.send_text(str(e), 500)
        await self.stream(ctx, code, env_vars)

    async def stream(self, ctx, code, env_vars):
        self.clear_header("Content-Type")  # as E2B's server: none
        gen = ctx.execute(code, env_vars, self.gone)
        try:
            await self.flush()  # the headers now, as E2B's server: the turn may take long
            try:
                async for item in gen:
                    self.write(json.dumps(item) + "\n")
                    await self.flush()
            except Exception as e:  # the kernel could not start, or the like
                log.error("execution in context %s failed: %s", ctx.id, e)
                self.write(json.dumps(outputs.error(type(e).__name__, str(e), "")) + "\n")
            self.write('{"type": "end_of_execution"}\n')
            await self.flush()
        except tornado.iostream.StreamClosedError:
            log.info("client went away during an execution of context %s", ctx.id)
        finally:
            await gen.aclose()
        if not self._finished:
            try:
                self.finish()
            except tornado.iostream.StreamClosedError:
                pass


class ContextList(Base):
    def get(self):
        self.send_json(self.contexts.list())

    async def post(self):
        body = self.body()
        if body is None:
            return
        language = self.optional_str(body, "language")
        cwd = self.optional_str(body, "cwd")
        if language is False or cwd is False:
            return
        try:
            ctx = await self.contexts.create(language, cwd)
        except Exception as e:
            return self.send_text(str(e), 500)
        self.send_json(ctx.info())


class ContextOne(Base):
    async def delete(self, context_id):
        if not await self.contexts.remove(context_id):
            return self.send_text(f"Context {context_id} not found", 404)
        self.send_json(None)


class ContextRestart(Base):
    async def post(self, context_id):
        try:
            found = await self.contexts.restart(context_id)
        except Exception as e:
            return self.send_text(f"Failed to restart context {context_id}: {e}", 500)
        if not found:
            return self.send_text(f"Context {context_id} not found", 404)
        self.send_json(None)


def make_app(contexts):
    args = {"contexts": contexts}
    return tornado.web.Application(
        [
            (r"/health", Health, args),
            (r"/execute", Execute, args),
            (r"/contexts", ContextList, args),
            (r"/contexts/([^/]+)/restart", ContextRestart, args),
            (r"/contexts/([^/]+)", ContextOne, args),
        ],
        log_function=lambda handler: None,
    )
