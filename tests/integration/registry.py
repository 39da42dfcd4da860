#!/usr/bin/python3
"""A real OCI registry for the integration tests of package push and pull: CNCF distribution (the
Debian `docker-registry` binary, 2.8.x) run here in the foreground as the current user, on a free
loopback port, with filesystem storage under a temp directory; and `skopeo`, the independent
client the tests compare the tools against.

Why the real registry and not a Python imitation: what has to be right is what a registry really
accepts and answers (it wants an Accept header naming OCI manifests before it serves one, it
refuses a manifest whose blobs it lacks, it checks upload digests, its error bodies), and an
imitation would only repeat our own reading of the spec.

What the tests observe through this fixture:
  * requests(): the registry's HTTP access log, parsed. 2.8 writes one Apache "combined" line per
    request on its stdout (log.accesslog, on unless disabled); its own logrus log goes to stderr.
    Both are appended to files here, across stop() and start(), so counts span a restart.
  * blob_path(): the filesystem driver's data file of a blob, to corrupt or remove it.
  * stop() / start(): the same port, storage and HTTP secret (upload URLs carry state signed with
    it), so a test can take the registry away in the middle of a transfer and bring it back.
  * optional basic auth (a bcrypt htpasswd file from `htpasswd -Bbn`), or token auth: a token
    endpoint in this process that signs RS256 JWTs with a key and certificate made by the openssl
    CLI, which the registry verifies against that certificate (the x5c header carries it).

Environment: DOCKER_REGISTRY (the registry binary), SKOPEO; the tests skip without them.
"""
import base64
import collections
import http.server
import json
import os
import re
import secrets
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

REGISTRY = (os.environ.get("DOCKER_REGISTRY") or shutil.which("docker-registry")
            or "/usr/bin/docker-registry")
SKOPEO = os.environ.get("SKOPEO") or shutil.which("skopeo") or "/usr/bin/skopeo"
HTPASSWD = shutil.which("htpasswd") or "/usr/bin/htpasswd"
# The fixture's own probes carry this user agent, so that requests() leaves them out.
FIXTURE_AGENT = "cudaq-rt-registry-fixture"


def registry_available():
    return os.access(REGISTRY, os.X_OK)


def skopeo_available():
    return os.access(SKOPEO, os.X_OK)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _read_text(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


# One access-log line, as distribution 2.8.2 writes it (gorilla/handlers' combined format):
#   127.0.0.1 - - [02/Dec/2026:14:39:15 +0000] "HEAD /v2/x/blobs/sha256:… HTTP/1.1" 404 157 ""
#   "curl/7.88.1"          (one line; wrapped here)
# The path keeps its query (upload URLs carry ?_state=…&digest=…). The byte count is what the
# handler wrote: for a HEAD it is the body a GET would have had, although none went out.
ACCESS_LINE = re.compile(r'^(?P<addr>\S+) \S+ (?P<user>\S+) \[(?P<time>[^\]]+)\] '
                         r'"(?P<method>\S+) (?P<path>\S+) (?P<proto>[^"]*)" (?P<status>\d{3}) '
                         r'(?P<size>\d+|-) "(?P<referer>[^"]*)" "(?P<agent>[^"]*)"$')
Request = collections.namedtuple("Request", "method path status size agent")

CONFIG = """version: 0.1
log:
  level: info
  formatter: text
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: {data}
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: 127.0.0.1:{port}
  secret: {secret}
{tls}health:
  storagedriver:
    enabled: false
{auth}"""


class Registry:
    """distribution's registry on 127.0.0.1, started on construction; close() when done.

    user/password: basic auth through an htpasswd file (or, with token_auth, the credentials the
    token endpoint asks for). token_auth: the registry wants bearer tokens from a realm served
    here; token_grant is the set of actions it grants of those asked for (change it to deny)."""

    SERVICE = "cudaq-rt-test-registry"
    ISSUER = "cudaq-rt-test-token-issuer"

    def __init__(self, tmp=None, user=None, password=None, token_auth=False, tls=False):
        self.own_tmp = tmp is None
        self.tmp = tmp or tempfile.mkdtemp(prefix="cudaq-rt-registry-test.")
        self.data = os.path.join(self.tmp, "data")
        os.makedirs(self.data, exist_ok=True)
        self.user, self.password = user, password
        self.access_log_path = os.path.join(self.tmp, "access.log")
        self.log_path = os.path.join(self.tmp, "registry.log")
        self.secret = secrets.token_hex(16)
        self.proc, self.port, self.token_server = None, None, None
        self.token_grant = {"pull", "push", "delete", "*"}
        self.token_requests = []  # (query dict, granted access list), one per token issued
        auth = ""
        if token_auth:
            auth = self._start_token_endpoint()
        elif user is not None:
            path = os.path.join(self.tmp, "htpasswd")
            r = subprocess.run([HTPASSWD, "-Bbn", user, password], capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError("htpasswd failed: " + r.stderr)
            with open(path, "w") as f:
                f.write(r.stdout.strip() + "\n")
            auth = f"auth:\n  htpasswd:\n    realm: {self.SERVICE}\n    path: {path}\n"
        self.auth = auth
        self.ca = None  # with tls: the PEM file of the CA that signed the registry's certificate
        self.tls = self._make_tls() if tls else ""
        self.start()

    # -- lifetime ----------------------------------------------------------------------------

    def start(self):
        """Starts the registry, on the port it had before if it had one, and waits until /v2/
        answers (200, or 401 with auth)."""
        if self.proc is not None and self.proc.poll() is None:
            return
        for _attempt in range(1 if self.port else 5):
            port = self.port or free_port()
            config = os.path.join(self.tmp, "config.yml")
            with open(config, "w") as f:
                f.write(CONFIG.format(data=self.data, port=port, secret=self.secret,
                                      auth=self.auth, tls=self.tls))
            with open(self.access_log_path, "ab") as out, open(self.log_path, "ab") as err:
                self.proc = subprocess.Popen([REGISTRY, "serve", config], stdout=out, stderr=err,
                                             stdin=subprocess.DEVNULL)
            deadline = time.time() + 15
            while time.time() < deadline and self.proc.poll() is None:
                if self._probe(port, timeout=0.5) is not None:
                    self.port = port
                    return
                time.sleep(0.05)
            self.stop()
        raise RuntimeError("the registry did not start:\n" + self.log()[-4000:])

    def stop(self, kill=False):
        """Ends the registry process (SIGTERM, or SIGKILL with kill); storage and port are kept
        for start(). Connections in flight break."""
        if self.proc is not None and self.proc.poll() is None:
            if kill:
                self.proc.kill()
            else:
                self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def close(self):
        self.stop()
        if self.token_server is not None:
            self.token_server.shutdown()
            self.token_server.server_close()
            self.token_server = None
        if self.own_tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    # -- addresses and storage ---------------------------------------------------------------

    @property
    def url(self):
        """host:port, as a docker:// reference or a package remote names the registry."""
        return f"127.0.0.1:{self.port}"

    @property
    def base(self):
        return f"http://127.0.0.1:{self.port}"

    def blob_path(self, digest):
        """The filesystem driver's file holding a blob's bytes ('sha256:<hex>' or '<hex>')."""
        hexd = digest.split(":")[-1]
        return os.path.join(self.data, "docker", "registry", "v2", "blobs", "sha256", hexd[:2],
                            hexd, "data")

    # -- logs ------------------------------------------------------------------------------

    def log(self):
        """The registry's own log (logrus text lines: errors with err.code and err.detail)."""
        return _read_text(self.log_path)

    def requests(self, method=None, path=None, since=0):
        """The requests the registry has answered, in the order it logged them, as Request
        (method, path with query, status int, size int or None, user agent); the fixture's own
        probes left out. method filters on equality, path on a regular expression that must match
        at the path's start (e.g. r"/v2/example/blobs/uploads/"); since skips that many of the
        (unfiltered) requests, e.g. len(reg.requests()) taken before the step being measured.

        A line is written just after its response is sent, so while the registry runs this first
        makes a request of its own and waits for it to be logged: everything a client had
        finished before the call is then in the log."""
        if self.running:
            self._sync()
        out = []
        for line in _read_text(self.access_log_path).splitlines():
            m = ACCESS_LINE.match(line)
            if not m or m["agent"].startswith(FIXTURE_AGENT):
                continue
            out.append(Request(m["method"], m["path"], int(m["status"]),
                               None if m["size"] == "-" else int(m["size"]), m["agent"]))
        out = out[since:]
        return [r for r in out if (method is None or r.method == method) and
                (path is None or re.match(path, r.path))]

    def _probe(self, port, timeout=2.0, marker=""):
        """GET /v2/ with the fixture's user agent: its status, None when nothing answered."""
        scheme = "https" if self.ca else "http"
        req = urllib.request.Request(f"{scheme}://127.0.0.1:{port}/v2/",
                                     headers={"User-Agent": FIXTURE_AGENT + marker})
        context = ssl.create_default_context(cafile=self.ca) if self.ca else None
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except (OSError, ValueError):
            return None

    def _sync(self):
        marker = "/" + secrets.token_hex(8)
        self._probe(self.port, marker=marker)
        deadline = time.time() + 5
        while time.time() < deadline and marker not in _read_text(self.access_log_path):
            time.sleep(0.02)

    # -- TLS ---------------------------------------------------------------------------------

    def _make_tls(self):
        """A CA of the test's own (openssl) and a certificate it signs for 127.0.0.1 and
        localhost; returns the registry's http.tls section."""
        t = lambda name: os.path.join(self.tmp, name)
        def openssl(*args):
            subprocess.run(["openssl", *args], check=True, capture_output=True)
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", t("ca.key"), "-out",
                t("ca.pem"), "-days", "2", "-subj", "/CN=cudaq-rt test CA", "-addext",
                "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", t("tls.key"), "-out",
                t("tls.csr"), "-subj", "/CN=127.0.0.1")
        with open(t("tls.ext"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        openssl("x509", "-req", "-in", t("tls.csr"), "-CA", t("ca.pem"), "-CAkey", t("ca.key"),
                "-CAcreateserial", "-out", t("tls.crt"), "-days", "2", "-extfile", t("tls.ext"))
        self.ca = t("ca.pem")
        return f"  tls:\n    certificate: {t('tls.crt')}\n    key: {t('tls.key')}\n"

    # -- token auth ------------------------------------------------------------------------

    def _start_token_endpoint(self):
        """Makes the signing key and certificate with openssl, serves /token on a loopback port
        of its own, and returns the registry's auth: section that trusts it."""
        key, cert = os.path.join(self.tmp, "token.key"), os.path.join(self.tmp, "token.crt")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                        key, "-out", cert, "-days", "2", "-subj", "/CN=" + self.ISSUER],
                       check=True, capture_output=True)
        with open(cert) as f:  # a PEM body is the base64 of the DER that x5c wants
            x5c = "".join(l for l in f.read().splitlines() if l and not l.startswith("-----"))
        fixture = self

        def b64url(data):
            return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

        def sign(access):
            now = int(time.time())
            header = {"typ": "JWT", "alg": "RS256", "x5c": [x5c]}
            claims = {"iss": fixture.ISSUER, "sub": fixture.user or "", "aud": fixture.SERVICE,
                      "exp": now + 300, "nbf": now - 10, "iat": now,
                      "jti": secrets.token_hex(8), "access": access}
            signing_input = (b64url(json.dumps(header).encode()) + "." +
                             b64url(json.dumps(claims).encode()))
            sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", key],
                                 input=signing_input.encode(), capture_output=True, check=True)
            return signing_input + "." + b64url(sig.stdout)

        class TokenHandler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query)
                if fixture.user is not None:
                    want = "Basic " + base64.b64encode(
                        f"{fixture.user}:{fixture.password}".encode()).decode()
                    if self.headers.get("Authorization") != want:
                        self.send_response(401)
                        self.send_header("WWW-Authenticate", 'Basic realm="token"')
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                access = []
                for scope in query.get("scope", []):  # repository:NAME:pull,push
                    kind, _, rest = scope.partition(":")
                    name, _, actions = rest.rpartition(":")
                    granted = [a for a in actions.split(",") if a in fixture.token_grant]
                    access.append({"type": kind, "name": name, "actions": granted})
                token = sign(access)
                fixture.token_requests.append((query, access))
                body = json.dumps({"token": token, "access_token": token,
                                   "expires_in": 300}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.token_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), TokenHandler)
        threading.Thread(target=self.token_server.serve_forever, daemon=True).start()
        self.realm = f"http://127.0.0.1:{self.token_server.server_address[1]}/token"
        return (f"auth:\n  token:\n    realm: {self.realm}\n    service: {self.SERVICE}\n"
                f"    issuer: {self.ISSUER}\n    rootcertbundle: {cert}\n")


_SKOPEO_HOME = None
# Which TLS flags each skopeo subcommand takes: every registry here is plain HTTP on loopback.
_TLS_FLAGS = {"copy": ["--src-tls-verify=false", "--dest-tls-verify=false"],
              "sync": ["--src-tls-verify=false", "--dest-tls-verify=false"],
              "inspect": ["--tls-verify=false"], "delete": ["--tls-verify=false"],
              "list-tags": ["--tls-verify=false"], "login": ["--tls-verify=false"],
              "logout": [], "manifest-digest": [], "standalone-sign": [],
              "standalone-verify": []}


def skopeo_env():
    """An environment for skopeo that reads nothing of the user's or of /etc: HOME, XDG dirs, an
    empty registries.conf, a policy that accepts anything, all in one temp dir of its own."""
    global _SKOPEO_HOME
    if _SKOPEO_HOME is None:
        _SKOPEO_HOME = tempfile.mkdtemp(prefix="cudaq-rt-skopeo-home.")
        for d in ("config", "cache", "run", "registries.d", "tmp"):
            os.makedirs(os.path.join(_SKOPEO_HOME, d), mode=0o700)
        with open(os.path.join(_SKOPEO_HOME, "policy.json"), "w") as f:
            f.write('{"default": [{"type": "insecureAcceptAnything"}]}\n')
        with open(os.path.join(_SKOPEO_HOME, "registries.conf"), "w") as f:
            f.write('unqualified-search-registries = []\n')
        import atexit
        atexit.register(shutil.rmtree, _SKOPEO_HOME, True)
    e = dict(os.environ)
    for k in ("REGISTRY_AUTH_FILE", "DOCKER_CONFIG", "CONTAINERS_CONF"):
        e.pop(k, None)
    e.update(HOME=_SKOPEO_HOME, XDG_CONFIG_HOME=os.path.join(_SKOPEO_HOME, "config"),
             XDG_CACHE_HOME=os.path.join(_SKOPEO_HOME, "cache"),
             XDG_RUNTIME_DIR=os.path.join(_SKOPEO_HOME, "run"),
             CONTAINERS_REGISTRIES_CONF=os.path.join(_SKOPEO_HOME, "registries.conf"),
             TMPDIR=os.path.join(_SKOPEO_HOME, "tmp"))
    return e


def skopeo(*args, check=False, timeout=120):
    """Runs `skopeo SUBCOMMAND ARGS...` with --insecure-policy, a policy and registries.d of its
    own, and the TLS flags for plain HTTP put right after the subcommand. Returns the
    CompletedProcess (stdout and stderr as text); with check, raises unless it succeeded.
    Credentials are the caller's: --creds / --src-creds / --dest-creds user:pass."""
    env = skopeo_env()
    sub, rest = args[0], list(args[1:])
    cmd = [SKOPEO, "--insecure-policy", "--policy", os.path.join(env["HOME"], "policy.json"),
           "--registries.d", os.path.join(env["HOME"], "registries.d"), sub,
           *_TLS_FLAGS.get(sub, []), *rest]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r
