# Placeholder until tent's Code Interpreter server lands: a /health on 49999.
import http.server, os


class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"OK")


http.server.ThreadingHTTPServer(("0.0.0.0", int(os.environ.get("TENT_CI_PORT", "49999"))), H).serve_forever()
