#!/usr/bin/env python3
"""Traccar's OsmAnd port as the package test needs it: one line "ID TIMESTAMP" per position.

    fake-traccar.py PORT LOG

Answers as Traccar's OsmAndProtocolDecoder does: a position, in the query or as a form body, gets
200 with an empty body; a GET naming nothing (the relay's probe) gets 400, as an unknown device's
empty request does. HTTP/1.1 keep-alive, so a pipelining client is read in order. Each position is
appended to LOG and flushed before the answer goes, so a line there means the relay heard 200.
"""
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

port, log_path = int(sys.argv[1]), sys.argv[2]
log = open(log_path, "a", encoding="utf-8")
lock = threading.Lock()


class OsmAnd(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status):
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def position(self, query):
        fields = parse_qs(query)
        device = (fields.get("id") or fields.get("deviceid") or [""])[0]
        timestamp = (fields.get("timestamp") or [""])[0]
        if not device or not timestamp:
            self.answer(400)
            return
        with lock:
            log.write(f"{device} {timestamp}\n")
            log.flush()
        self.answer(200)

    def do_GET(self):
        self.position(urlsplit(self.path).query)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode("utf-8", "replace")
        self.position(urlsplit(self.path).query or body)


ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", port), OsmAnd).serve_forever()
