"""Small network stand-ins on 127.0.0.1 for the job provider tests, each in a daemon thread.

- ``TcpForwarder``: forwards a port to another one; start it late to play a dashboard that comes up
  after the provider began retrying.
- ``ServiceProxy``: plays the Kubernetes API server's service proxy in front of a Ray dashboard:
  serves it under ``/api/v1/namespaces/<ns>/services/<svc>:<port>/proxy``, answers 401 without
  the expected bearer token, strips the Authorization header before forwarding (as the API
  server does), and can answer 503 to the first requests (a head Service without endpoints yet).
  Plain HTTP, or HTTPS with a certificate from ``make_tls_material``.
- ``start_fault_proxy``: a plain forwarder in front of a Ray dashboard that answers 500 to the
  paths matching a pattern (log endpoints failing while the status answers) and/or holds every
  response for a while (a slow dashboard that still answers).
"""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import re
import socket
import ssl
import struct
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.support.ray_head import free_port


class TcpForwarder:
    """Accepts on 127.0.0.1:listen_port and pipes each connection to 127.0.0.1:target_port.

    The port is bound when the forwarder is made (so that nothing else can take it) and listened
    on from start(): until then a connection to it is refused, as for a dashboard not up yet.
    refuse() listens but resets every connection, counting them in `refused`, so that a test can
    wait until a client has tried (and retried) before start() forwards.
    """

    def __init__(self, target_port: int, listen_port: int | None = None) -> None:
        self.target_port = target_port
        self.connections = 0
        self.refused = 0
        self._forwarding = False
        self._stopped = threading.Event()
        self._server: socket.socket | None = _bound_socket(listen_port)
        self.listen_port: int = self._server.getsockname()[1]
        self._listening = False

    def start(self) -> None:
        self._forwarding = True
        self._listen()

    def refuse(self) -> None:
        self._forwarding = False
        self._listen()

    def _listen(self) -> None:
        server = self._server
        if server is None:  # stopped before: take the same port again
            server = self._server = _bound_socket(self.listen_port)
            self._listening = False
        if self._listening:
            return
        self._stopped.clear()
        server.listen(64)
        server.settimeout(0.2)
        self._listening = True
        threading.Thread(target=self._accept_loop, args=(server,), daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()
        if self._server is not None:
            self._server.close()
            self._server = None
        self._listening = False

    def _accept_loop(self, server: socket.socket) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._forwarding:
                # SO_LINGER 0: close() sends a reset, as a port nothing listens on would.
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                client.close()
                self.refused += 1
                continue
            self.connections += 1
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            client.settimeout(None)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _bound_socket(port: int | None, attempts: int = 5) -> socket.socket:
    """A socket bound to 127.0.0.1:port, or to a free port from below the ephemeral range (see
    ray_head.free_ports) when port is None, chosen again if taken between choice and bind."""
    for attempt in range(1, attempts + 1):
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            server.bind(("127.0.0.1", port or free_port()))
        except OSError:
            server.close()
            if port is not None or attempt == attempts:
                raise
            continue
        return server
    raise AssertionError("unreachable")


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    prefix: str
    token: str | None  # None: no Authorization check
    fail_paths: re.Pattern[str] | None  # answer 500 to these paths (after the prefix)
    delay_s: float  # hold each forwarded response this long
    target_port: int
    forwarded: int
    rejected: int
    failed: int
    unavailable: int  # answer this many more authorized requests with 503 before forwarding


class _ProxyHandler(BaseHTTPRequestHandler):
    server: _ProxyServer

    def do_GET(self) -> None:
        self._forward()

    def do_POST(self) -> None:
        self._forward()

    def do_PUT(self) -> None:
        self._forward()

    def do_DELETE(self) -> None:
        self._forward()

    def log_message(self, format: str, *args: object) -> None:
        return  # keep test output quiet

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        token = self.server.token
        if token is not None and self.headers.get("Authorization") != f"Bearer {token}":
            self.server.rejected += 1
            self._reply(401, b'{"kind":"Status","code":401,"message":"Unauthorized"}')
            return
        if self.server.unavailable > 0:
            self.server.unavailable -= 1
            # What the API server says while the head Service has no ready endpoints yet.
            self._reply(
                503, b'{"kind":"Status","code":503,"message":"no endpoints available for service"}'
            )
            return
        if not self.path.startswith(self.server.prefix + "/"):
            self._reply(404, b'{"kind":"Status","code":404,"message":"not found"}')
            return
        path = self.path[len(self.server.prefix) :]
        if self.server.fail_paths is not None and self.server.fail_paths.search(path):
            self.server.failed += 1
            self._reply(500, b"Internal Server Error (fault proxy)", "text/plain")
            return
        upstream = http.client.HTTPConnection("127.0.0.1", self.server.target_port, timeout=60)
        skip = {"host", "authorization", "connection", "content-length"}
        headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
        upstream.request(self.command, path, body=body or None, headers=headers)
        response = upstream.getresponse()
        payload = response.read()
        upstream.close()
        time.sleep(self.server.delay_s)
        self.server.forwarded += 1
        self._reply(response.status, payload, response.getheader("Content-Type"))

    def _reply(self, status: int, payload: bytes, content_type: str | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type or "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@dataclass
class ServiceProxy:
    """A fake API-server service proxy; `endpoint` is what goes into kube_api_endpoint."""

    endpoint: str
    prefix: str
    _server: _ProxyServer

    @property
    def forwarded(self) -> int:
        return self._server.forwarded

    @property
    def rejected(self) -> int:
        return self._server.rejected

    @property
    def failed(self) -> int:
        return self._server.failed

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def start_service_proxy(
    dashboard_url: str,
    token: str,
    namespace: str,
    service: str,
    port_name: str = "dashboard",
    tls: TlsMaterial | None = None,
    unavailable_first: int = 0,
) -> ServiceProxy:
    server = _ProxyServer(("127.0.0.1", 0), _ProxyHandler)
    server.prefix = f"/api/v1/namespaces/{namespace}/services/{service}:{port_name}/proxy"
    server.token = token
    server.target_port = int(dashboard_url.rsplit(":", 1)[1])
    server.forwarded = 0
    server.rejected = 0
    server.failed = 0
    server.unavailable = unavailable_first
    server.fail_paths = None
    server.delay_s = 0.0
    port = server.server_address[1]
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls.server_cert, tls.server_key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        endpoint = f"127.0.0.1:{port}"  # no scheme: the provider assumes https, as for GKE
    else:
        endpoint = f"http://127.0.0.1:{port}"
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
    ).start()
    return ServiceProxy(endpoint=endpoint, prefix=server.prefix, _server=server)


def start_fault_proxy(
    dashboard_url: str, fail_paths: str | None = None, delay_s: float = 0.0
) -> ServiceProxy:
    """A plain-HTTP forwarder to dashboard_url (no prefix, no token) that answers 500 to the
    paths matching the regex fail_paths and holds every forwarded response for delay_s;
    `endpoint` is the dashboard URL to give the provider."""
    server = _ProxyServer(("127.0.0.1", 0), _ProxyHandler)
    server.prefix, server.token = "", None
    server.target_port = int(dashboard_url.rsplit(":", 1)[1])
    server.forwarded = server.rejected = server.failed = server.unavailable = 0
    server.fail_paths = re.compile(fail_paths) if fail_paths else None
    server.delay_s = delay_s
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
    ).start()
    return ServiceProxy(
        endpoint=f"http://127.0.0.1:{server.server_address[1]}", prefix="", _server=server
    )


@dataclass(frozen=True)
class TlsMaterial:
    ca_pem: bytes  # the CA certificate, PEM
    server_cert: Path  # server certificate for 127.0.0.1 signed by the CA
    server_key: Path


def make_tls_material(folder: Path, common_name: str = "test-cluster-ca") -> TlsMaterial:
    """A throwaway CA and a server certificate for IP 127.0.0.1 (what GKE's CA setup looks like)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = folder / "server.pem", folder / "server.key"
    cert_path.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return TlsMaterial(
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        server_cert=cert_path,
        server_key=key_path,
    )
