#!/usr/bin/env python3
"""An agent that talks to Chronos NAS the way a Hermes agent's Chronos cron
provider does, for the compatibility tests in e2e/hermes.

It plays both halves of such an agent, with the standard library and PyJWT only:

* Its NAS client uses urllib: a Bearer token (read from a file on every call,
  as a refreshed access token would be), JSON bodies. Provision sends fire_at
  as Python's isoformat() writes an aware datetime (a +hh:mm offset, with
  microseconds when they are not zero) and dedup_key "job_id:fire_at". List
  is one GET without a query string; only its "armed" entries are used (one
  page, failed_fires ignored).
* Its scheduler keeps jobs in memory (job id -> next_run_at string) and an
  in-memory map of what it armed. Reconcile takes the observed set from that
  map while it is warm, and from one NAS list on a cold start; it provisions
  every job whose fire_at string differs and cancels every armed job it does
  not want. After a run, a recurring job is armed at its next fire.
* Its fire endpoint (http.server) verifies the Bearer token with PyJWT's
  PyJWKClient against NAS's JWKS, allowing only RS256/RS384/RS512/ES256/ES384,
  requiring exp and aud, checking aud, iss (the portal URL) and purpose ==
  cron_fire; any failure answers 401. The first --cold-jwks-failures key-set
  fetches fail as an unreachable JWKS would. A verified fire answers 202
  {"status": "accepted"} and records the run once per slot (200 duplicate
  after that, 200 gone for an unknown job); a job told to refuse answers the
  status it was given.

The test drives it with one JSON command per line on stdin ({"id": n, "cmd":
...}) and reads one JSON line per reply ({"id": n, "ok": ...}) and per event
({"event": ...}) on stdout. Diagnostics go to stderr.
"""

import argparse
import json
import logging
import re
import sys
import threading
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt

log = logging.getLogger("hermes-agent")

FIRE_PATH = "/api/cron/fire"
ALLOWED_ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384"]
FIRE_PURPOSE = "cron_fire"

_out_lock = threading.Lock()


def emit(message):
    """Write one JSON line to stdout (replies and events share it)."""
    line = json.dumps(message, sort_keys=True)
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def parse_instant(text):
    """An RFC 3339 string as an aware datetime, whatever its fraction length."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", text or "")
    if not m:
        raise ValueError("not an RFC 3339 time: %r" % (text,))
    base, fraction, zone = m.groups()
    micros = int(((fraction or "") + "000000")[:6])
    zone = "+00:00" if zone == "Z" else zone
    return datetime.fromisoformat(base + zone).replace(microsecond=micros)


def slot_key(job_id, fire_at):
    """One key per (job, instant), whatever the spelling of the instant."""
    return "%s@%d" % (job_id, round(parse_instant(fire_at).timestamp() * 1e6))


# ---- NAS client ----


class NASError(Exception):
    """A NAS call that failed: status None on a transport error."""

    def __init__(self, message, status=None, code=""):
        super().__init__(message)
        self.status = status
        self.code = code


class NASClient:
    def __init__(self, portal_url, token_file, timeout=15.0):
        self.portal_url = portal_url.rstrip("/")
        self.token_file = token_file
        self.timeout = timeout
        self.calls = {"provision": 0, "cancel": 0, "list": 0}
        self._lock = threading.Lock()

    def _token(self):
        with open(self.token_file, encoding="utf-8") as f:
            return f.read().strip()

    def _call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.portal_url + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self._token())
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            code = ""
            try:
                code = str((json.loads(raw) or {}).get("error") or "")
            except ValueError:
                pass
            raise NASError("%s %s answered %d: %s" % (method, path, e.code, raw[:200].decode("utf-8", "replace")),
                           status=e.code, code=code) from None
        except OSError as e:
            raise NASError("%s %s failed: %s" % (method, path, e)) from None
        return json.loads(raw) if raw else {}

    def _count(self, what):
        with self._lock:
            self.calls[what] += 1

    def provision(self, job_id, fire_at, callback_url):
        self._count("provision")
        return self._call("POST", "/api/agent-cron/provision", {
            "job_id": job_id,
            "fire_at": fire_at,
            "agent_callback_url": callback_url,
            "dedup_key": "%s:%s" % (job_id, fire_at),
        })

    def cancel(self, job_id):
        self._count("cancel")
        return self._call("POST", "/api/agent-cron/cancel", {"job_id": job_id})

    def list_page(self):
        """One GET of the list, no query string, no paging."""
        self._count("list")
        return self._call("GET", "/api/agent-cron/list")

    def list_armed(self):
        page = self.list_page()
        armed = page.get("armed") if isinstance(page, dict) else None
        return armed if isinstance(armed, list) else []


# ---- scheduler ----


class Scheduler:
    def __init__(self, client, callback_url):
        self.client = client
        self.callback_url = callback_url
        self.lock = threading.RLock()
        self.jobs = {}  # job id -> {"next_run_at": str, "every": float or None}
        self.armed = {}  # job id -> fire_at string this process armed or saw

    def arm(self, job_id, fire_at=None):
        """Provision job_id at fire_at (default: its next_run_at)."""
        if fire_at is None:
            with self.lock:
                fire_at = self.jobs[job_id]["next_run_at"]
        answer = self.client.provision(job_id, fire_at, self.callback_url)
        with self.lock:
            self.armed[job_id] = fire_at
        return fire_at, answer

    def observed(self):
        with self.lock:
            if self.armed:
                return dict(self.armed), False
        try:
            seen = {item["job_id"]: item.get("fire_at", "") for item in self.client.list_armed() if item.get("job_id")}
        except NASError as e:
            log.warning("list failed, arming everything again: %s", e)
            return {}, True
        with self.lock:
            self.armed.update(seen)
        return seen, True

    def reconcile(self, cold):
        if cold:
            with self.lock:
                self.armed.clear()
        with self.lock:
            desired = {job_id: job["next_run_at"] for job_id, job in self.jobs.items()}
        seen, listed = self.observed()
        provisioned, cancelled, errors = [], [], []
        for job_id, fire_at in sorted(desired.items()):
            if seen.get(job_id) != fire_at:
                try:
                    self.arm(job_id, fire_at)
                    provisioned.append(job_id)
                except NASError as e:
                    errors.append(str(e))
        for job_id in sorted(seen):
            if job_id not in desired:
                try:
                    self.client.cancel(job_id)
                    cancelled.append(job_id)
                except NASError as e:
                    errors.append(str(e))
                finally:
                    with self.lock:
                        self.armed.pop(job_id, None)
        return {"listed": listed, "observed": len(seen), "provisioned": provisioned,
                "cancelled": cancelled, "errors": errors}

    def after_run(self, job_id, fire_at):
        """A recurring job is armed at its next fire; a one-shot is done."""
        with self.lock:
            job = self.jobs.get(job_id)
            if job is None or job["next_run_at"] != fire_at:
                return
            if not job["every"]:
                del self.jobs[job_id]
                self.armed.pop(job_id, None)
                return
            ran = parse_instant(fire_at)
            next_at = (ran + timedelta(seconds=job["every"])).isoformat()
            job["next_run_at"] = next_at
        try:
            self.arm(job_id, next_at)
            emit({"event": "rearmed", "job_id": job_id, "fire_at": next_at})
        except NASError as e:
            emit({"event": "rearm_failed", "job_id": job_id, "error": str(e), "status": e.status})


# ---- fire endpoint ----


class ColdKeySetClient(jwt.PyJWKClient):
    """PyJWKClient whose first `failures` fetches fail, as a key set that is
    unreachable while the agent wakes would."""

    def __init__(self, uri, failures):
        super().__init__(uri)
        self._failures = failures
        self._lock = threading.Lock()

    def fetch_data(self):
        with self._lock:
            fail = self._failures > 0
            if fail:
                self._failures -= 1
        if fail:
            raise jwt.PyJWKClientError("Fail to fetch data from the url, err: cold key set")
        return super().fetch_data()


class FireVerifier:
    def __init__(self, jwks_url, audience, issuer, cold_failures):
        self.jwks = ColdKeySetClient(jwks_url, cold_failures)
        self.audience = audience
        self.issuer = issuer

    def verify(self, token):
        """(claims, header, None) or (None, header, why)."""
        header = {}
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            pass
        try:
            key = self.jwks.get_signing_key_from_jwt(token).key
        except jwt.PyJWKClientError as e:
            return None, header, "key set: %s" % e
        except jwt.PyJWTError as e:
            return None, header, "token: %s: %s" % (type(e).__name__, e)
        try:
            claims = jwt.decode(token, key, algorithms=ALLOWED_ALGORITHMS, audience=self.audience,
                                issuer=self.issuer, leeway=30, options={"require": ["exp", "aud"]})
        except jwt.PyJWTError as e:
            return None, header, "token: %s: %s" % (type(e).__name__, e)
        if claims.get("purpose") != FIRE_PURPOSE:
            return None, header, "token: purpose is %r" % (claims.get("purpose"),)
        return claims, header, None


class Agent:
    def __init__(self, args):
        self.verifier = FireVerifier(args.jwks_url, args.audience, args.portal_url, args.cold_jwks_failures)
        self.client = NASClient(args.portal_url, args.token_file)
        self.scheduler = None  # set once the listener knows its port
        self.lock = threading.Lock()
        self.refuse = {}  # job id -> status the fire endpoint answers
        self.ran = set()  # slot keys that ran


def make_handler(agent):
    class FireHandler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            log.debug("fire endpoint: " + fmt, *args)

        def answer(self, status, body):
            data = json.dumps(body).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if self.path != FIRE_PATH:
                self.answer(404, {"error": "not_found"})
                return
            event = {"event": "fire"}
            auth = self.headers.get("Authorization") or ""
            token = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
            claims, header, why = agent.verifier.verify(token)
            event.update(alg=header.get("alg", ""), kid=header.get("kid", ""), typ=header.get("typ", ""))
            try:
                body = json.loads(raw)
            except ValueError:
                body = {}
            event.update(job_id=body.get("job_id", ""), fire_at=body.get("fire_at", ""),
                         schedule_id=body.get("schedule_id", ""), attempt=body.get("attempt", 0))
            if claims is None:
                event.update(status=401, outcome="unauthorized", reason=why)
                self.answer(401, {"error": "unauthorized"})
                emit(event)
                return
            event.update(aud=claims.get("aud"), iss=claims.get("iss"), purpose=claims.get("purpose"),
                         claim_job_id=claims.get("job_id", ""), claim_fire_at=claims.get("fire_at", ""))
            job_id, fire_at = body.get("job_id"), body.get("fire_at")
            if not isinstance(job_id, str) or not isinstance(fire_at, str) or claims.get("job_id") != job_id:
                event.update(status=400, outcome="bad_request", reason="body does not match the token")
                self.answer(400, {"error": "invalid_request"})
                emit(event)
                return
            with agent.lock:
                refuse = agent.refuse.get(job_id)
            if refuse:
                event.update(status=refuse, outcome="refused")
                self.answer(refuse, {"error": "invalid_request", "error_description": "refused by the test"})
                emit(event)
                return
            with agent.scheduler.lock:
                known = job_id in agent.scheduler.jobs
            key = slot_key(job_id, fire_at)
            with agent.lock:
                duplicate = key in agent.ran
                if known and not duplicate:
                    agent.ran.add(key)
            if not known:
                event.update(status=200, outcome="gone")
                self.answer(200, {"status": "gone", "job_id": job_id})
                emit(event)
                return
            if duplicate:
                event.update(status=200, outcome="duplicate")
                self.answer(200, {"status": "duplicate", "job_id": job_id})
                emit(event)
                return
            event.update(status=202, outcome="accepted")
            self.answer(202, {"status": "accepted"})
            emit(event)
            emit({"event": "run", "job_id": job_id, "fire_at": fire_at, "attempt": body.get("attempt", 0)})
            threading.Thread(target=agent.scheduler.after_run, args=(job_id, scheduled_fire_at(job_id, fire_at)),
                             daemon=True).start()

    def scheduled_fire_at(job_id, fire_at):
        """The job's own spelling of the slot that fired (NAS may spell it
        differently)."""
        with agent.scheduler.lock:
            job = agent.scheduler.jobs.get(job_id)
            if job and slot_key(job_id, job["next_run_at"]) == slot_key(job_id, fire_at):
                return job["next_run_at"]
        return fire_at

    return FireHandler


# ---- commands ----


def fire_at_in(seconds, offset_minutes, micro):
    """now + seconds in a fixed +hh:mm zone, as isoformat() writes it."""
    zone = timezone(timedelta(minutes=offset_minutes))
    at = datetime.now(zone) + timedelta(seconds=seconds)
    if not micro:
        at = at.replace(microsecond=0)
    return at.isoformat()


def run_command(agent, msg):
    sched = agent.scheduler
    cmd = msg.get("cmd")
    if cmd == "add_job":
        job_id = msg["job_id"]
        fire_at = msg.get("fire_at") or fire_at_in(msg.get("in_seconds", 0), msg.get("offset_minutes", 0),
                                                     msg.get("micro", False))
        with sched.lock:
            sched.jobs[job_id] = {"next_run_at": fire_at, "every": msg.get("every")}
        fire_at, answer = sched.arm(job_id)
        return {"fire_at": fire_at, "schedule_id": answer.get("schedule_id", ""), "answer": answer}
    if cmd == "remove_job":
        with sched.lock:
            sched.jobs.pop(msg["job_id"], None)
        return sched.reconcile(cold=False)
    if cmd == "reconcile":
        return sched.reconcile(cold=bool(msg.get("cold")))
    if cmd == "list":
        return {"page": agent.client.list_page()}
    if cmd == "refuse":
        with agent.lock:
            agent.refuse[msg["job_id"]] = int(msg["status"])
        return {}
    if cmd == "calls":
        with agent.client._lock:
            return {"calls": dict(agent.client.calls)}
    raise ValueError("unknown command %r" % (cmd,))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--portal-url", required=True, help="NAS's base URL; also the expected iss")
    p.add_argument("--jwks-url", required=True, help="NAS's JWKS")
    p.add_argument("--audience", required=True, help="agent:{instance_id}")
    p.add_argument("--token-file", required=True, help="the access token NAS knows this agent by")
    p.add_argument("--listen", default="127.0.0.1:0", help="address of the fire endpoint")
    p.add_argument("--cold-jwks-failures", type=int, default=1,
                   help="how many key-set fetches fail before the key set is reachable")
    args = p.parse_args()
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    agent = Agent(args)
    host, port = args.listen.rsplit(":", 1)
    server = ThreadingHTTPServer((host, int(port)), make_handler(agent))
    server.daemon_threads = True
    callback_url = "http://%s:%d" % (host, server.server_address[1])
    agent.scheduler = Scheduler(agent.client, callback_url)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    emit({"event": "ready", "callback_url": callback_url, "pyjwt": jwt.__version__})

    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        msg = json.loads(line)
        reply = {"id": msg.get("id", 0), "ok": True}
        try:
            reply.update(run_command(agent, msg))
        except NASError as e:
            reply.update(ok=False, error=str(e), status=e.status, error_code=e.code)
        except Exception as e:  # a bad command: the test sees why
            reply.update(ok=False, error="%s: %s" % (type(e).__name__, e))
        emit(reply)
    server.shutdown()


if __name__ == "__main__":
    main()
