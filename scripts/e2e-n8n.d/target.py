#!/usr/bin/env python3
"""The counting target of scripts/e2e-n8n: every system the n8n examples talk to.

One local HTTP server stands in for the external systems of the examples
(docs/n8n.md). It records every request and answers like the real thing
would, so the end-to-end script can count side effects where they land:

  POST /crm/...  /warehouse/...  /mailer/...   effects (sent by oncegate's outbox,
                                              or directly by the baseline workflow)
  GET  /source/batches/<id>                   a batch of 10 records to process
  GET  /lookup/<id>                           a per-item lookup (fails for ids in
                                              the fail set: a flaky dependency)
  POST /model/draft                           a model API (fixed JSON; fails for
                                              tickets in the fail set)
  POST /chat/notify                           a chat/e-mail notification

Control (used by the script only):
  POST /control/fail   {"ids": [...]}         requests about these ids answer 500
  POST /control/reset                         forget everything recorded
  GET  /records?prefix=/crm/                  the recorded requests, oldest first
  GET  /healthz

Standard library only; one thread per connection.
"""

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

EFFECT_PREFIXES = ("/crm/", "/warehouse/", "/mailer/")
LOCK = threading.Lock()
STATE = {"records": [], "fail": set(), "seq": 0}


def record(method, path, headers, body):
    """Stores one request; returns its sequence number."""
    with LOCK:
        STATE["seq"] += 1
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = body.decode("utf-8", "replace")
        STATE["records"].append(
            {
                "seq": STATE["seq"],
                "at": time.time(),
                "method": method,
                "path": path,
                "idempotency_key": headers.get("Idempotency-Key"),
                "oncegate_key": headers.get("X-Oncegate-Key"),
                "body": parsed,
            }
        )
        return STATE["seq"]


def failing(*ids):
    with LOCK:
        return any(i in STATE["fail"] for i in ids if i)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet: the script prints summaries
        pass

    def reply(self, status, payload, headers=None):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def do_GET(self):
        url = urlparse(self.path)
        path = url.path
        if path == "/healthz":
            return self.reply(200, {"ok": True})
        if path == "/records":
            prefix = parse_qs(url.query).get("prefix", [""])[0]
            with LOCK:
                rows = [r for r in STATE["records"] if r["path"].startswith(prefix)]
            return self.reply(200, rows)
        if path == "/arrivals":
            # Cheap to poll while a benchmark runs (the overhead check): how
            # many requests at exactly `path` carried a charge starting with
            # `charge`, and when the last of them arrived.
            query = parse_qs(url.query)
            want = query.get("path", [""])[0]
            charge = query.get("charge", [""])[0]
            with LOCK:
                times = [
                    r["at"]
                    for r in STATE["records"]
                    if r["path"] == want
                    and isinstance(r["body"], dict)
                    and str(r["body"].get("charge", "")).startswith(charge)
                ]
            return self.reply(200, {"count": len(times), "last_at": max(times, default=None)})
        if path.startswith("/source/batches/"):
            batch = path.rsplit("/", 1)[1]
            record("GET", path, self.headers, b"")
            items = [
                {"id": f"{batch}-item-{n:02d}", "batch": batch, "amount": 100 * n}
                for n in range(1, 11)
            ]
            return self.reply(200, items)
        if path.startswith("/lookup/"):
            item = path.rsplit("/", 1)[1]
            record("GET", path, self.headers, b"")
            if failing(item):
                return self.reply(500, {"error": f"lookup of {item} failed"})
            return self.reply(200, {"id": item, "price_list": "2024-q4", "vat": 0.2})
        return self.reply(404, {"error": "no such path"})

    def do_POST(self):
        path = urlparse(self.path).path
        raw = self.body()
        if path == "/control/fail":
            ids = json.loads(raw or b"{}").get("ids", [])
            with LOCK:
                STATE["fail"] = set(ids)
            return self.reply(200, {"fail": ids})
        if path == "/control/reset":
            with LOCK:
                STATE["records"].clear()
                STATE["fail"] = set()
            return self.reply(200, {"reset": True})
        seq = record("POST", path, self.headers, raw)
        if path.startswith(EFFECT_PREFIXES):
            return self.reply(200, {"id": f"ext_{seq}"}, {"X-Message-Id": f"ext_{seq}"})
        if path == "/model/draft":
            ticket = (json.loads(raw or b"{}") or {}).get("ticket")
            if failing(ticket):
                return self.reply(500, {"error": "model provider unavailable"})
            return self.reply(200, MODEL_DRAFT)
        if path == "/chat/notify":
            return self.reply(200, {"ok": True})
        return self.reply(404, {"error": "no such path"})


# The fixed output that stands in for a model's structured reply.
MODEL_DRAFT = {
    "subject": "About your refund",
    "body": "Hello Ada, your refund of 42.00 EUR is on its way.",
    "tone": "friendly",
    "refund_amount_cents": 4200,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8099)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
