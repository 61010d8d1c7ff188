"""A real S3 server for tests: s3proxy (the local cluster's store, roles/understore), filesystem
backend, with signed requests required (AWS signature v2 or v4), on a free port of this machine.

The jar is the one the role installs, resolved from Maven Central into .cache/understore the same way.
"""

from __future__ import annotations

import fcntl
import secrets
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".cache" / "understore"
# The variables the client reads; a test sets its own and clears the rest.
AWS_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CA_BUNDLE",
    "AWS_PROFILE",
)


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    identity: str
    credential: str
    root: Path  # each directory below it is a bucket

    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": self.identity,
            "AWS_SECRET_ACCESS_KEY": self.credential,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": "us-east-1",
        }

    def make_bucket(self, name: str) -> str:
        """A new, empty bucket. The server lives for the session, so each test takes its own name."""
        (self.root / name).mkdir()
        return name


def s3proxy_jar() -> Path:
    defaults = yaml.safe_load((REPO / "roles/understore/defaults/main.yml").read_text())
    version = defaults["understore_s3proxy_version"]
    jar = CACHE / f"s3proxy-{version}-jar-with-dependencies.jar"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:  # pytest-xdist workers resolve it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not jar.exists():
            subprocess.run(
                [
                    "mvn",
                    "-B",
                    "-q",
                    "dependency:copy",
                    f"-Dartifact=org.gaul:s3proxy:{version}:jar:jar-with-dependencies",
                    "-Dtransitive=false",
                    f"-DoutputDirectory={CACHE}",
                ],
                check=True,
                timeout=600,
            )
    return jar


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(root: Path, workdir: Path) -> tuple[S3Server, subprocess.Popen]:
    port = _free_port()
    server = S3Server(f"http://127.0.0.1:{port}", "megahour-test", secrets.token_hex(20), root)
    conf = workdir / "s3proxy.conf"
    conf.write_text(
        f"s3proxy.endpoint=http://127.0.0.1:{port}\n"
        "s3proxy.authorization=aws-v2-or-v4\n"
        f"s3proxy.identity={server.identity}\n"
        f"s3proxy.credential={server.credential}\n"
        "jclouds.provider=filesystem\n"
        f"jclouds.filesystem.basedir={root}\n"
    )
    log = open(workdir / "s3proxy.log", "wb")  # noqa: SIM115 (the server writes it while it runs)
    proc = subprocess.Popen(
        ["java", "-Xmx256m", "-jar", str(s3proxy_jar()), "--properties", str(conf)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    tail = (workdir / "s3proxy.log").read_text(errors="replace")[-2000:]
    raise RuntimeError(f"s3proxy did not start on port {port}:\n{tail}")
