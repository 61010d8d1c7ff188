"""The S3 proxy's SigV4 authenticator (roles/alluxio/files/s3-authenticator), built with Maven and driven
through Alluxio's own interface by a small Java harness.

The strings-to-sign and signatures come from the Python side, as a client signs and as Alluxio's proxy
rebuilds the string-to-sign from the request it received: megahour.objectstore.sigv4 for most cases,
botocore for one, so the Java verifier is checked against a signer that shares no code with either.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from megahour.objectstore import sigv4
from tests.conftest import REPO

PROJECT = REPO / "roles" / "alluxio" / "files" / "s3-authenticator"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
# A logging backend for the harness only (the proxy has log4j's); the version of the slf4j-api the pom uses.
SLF4J_SIMPLE = "org.slf4j:slf4j-simple:1.7.30"
KEY_ID, SECRET = "MEGAHOURTESTKEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYsecret0001"
HOST = "gpu-1:39999"

HARNESS = r"""
import alluxio.proxy.s3.auth.AwsAuthInfo;
import io.megahour.alluxio.SigV4Authenticator;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;

/** One request a line: access id, string-to-sign (its newlines written as backslash n), signature. */
public final class Harness {
  public static void main(String[] args) throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    for (String line; (line = in.readLine()) != null; ) {
      String[] f = line.split("\t", -1);
      AwsAuthInfo info = new AwsAuthInfo(f[0], f[1].replace("\\n", "\n"), f[2]);
      // A new instance per request, as the proxy makes them.
      System.out.println(new SigV4Authenticator().isAuthenticated(info) ? "accept" : "reject");
      System.out.flush();
    }
  }
}
"""


def _missing_tool() -> str | None:
    for tool in ("mvn", "javac", "java"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not on PATH (the alluxio role builds the authenticator with Maven and a JDK)"
    return None


pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def classpath(tmp_path_factory) -> str:
    """The built jar, what it compiles against (Alluxio's proxy jar, slf4j-api), a logger and the harness.

    Built from a copy of the project, so the checkout keeps no target/; Maven's ~/.m2 is reused."""
    missing = _missing_tool()
    if missing:
        pytest.skip(missing)
    work = tmp_path_factory.mktemp("s3auth")
    project = work / "project"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("target"))
    cp_file, lib = work / "classpath.txt", work / "lib"
    (REPO / ".cache").mkdir(exist_ok=True)
    # xdist workers each build their own copy, one at a time: two Mavens downloading into ~/.m2 at once clash
    with open(REPO / ".cache" / "s3auth-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        build = subprocess.run(
            [
                "mvn",
                "-B",
                "-q",
                "-f",
                str(project / "pom.xml"),
                "package",
                f"{DEPENDENCY_PLUGIN}:build-classpath",
                f"{DEPENDENCY_PLUGIN}:copy",
                "-DskipTests",
                f"-Dmdep.outputFile={cp_file}",
                f"-Dartifact={SLF4J_SIMPLE}",
                f"-DoutputDirectory={lib}",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert build.returncode == 0, build.stdout + build.stderr
    jar = project / "target" / "megahour-alluxio-s3auth-1.0.0.jar"
    entries = [str(jar), *cp_file.read_text().strip().split(os.pathsep), *map(str, sorted(lib.glob("*.jar")))]
    classes = work / "harness"
    (work / "Harness.java").write_text(HARNESS)
    compiled = subprocess.run(
        ["javac", "-d", str(classes), "-cp", os.pathsep.join(entries), str(work / "Harness.java")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert compiled.returncode == 0, compiled.stderr
    return os.pathsep.join([str(classes), *entries])


class Proxy:
    """The harness as a long-lived process: the authenticator's static state lives across requests."""

    def __init__(self, classpath: str, credentials: Path, log: Path, *properties: str) -> None:
        self.log = log
        self._stderr = log.open("w")
        self._process = subprocess.Popen(
            [
                "java",
                f"-Dmegahour.s3.credentials.file={credentials}",
                *properties,
                "-cp",
                classpath,
                "Harness",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )

    def ask(self, access_id: str, string_to_sign: str, signature: str) -> str:
        assert "\t" not in string_to_sign and "\\n" not in string_to_sign
        line = "\t".join([access_id, string_to_sign.replace("\n", "\\n"), signature])
        self._process.stdin.write(line + "\n")
        self._process.stdin.flush()
        answer = self._process.stdout.readline().strip()
        assert answer in ("accept", "reject"), f"the harness died; its log:\n{self.log.read_text()}"
        return answer

    def close(self) -> str:
        self._process.stdin.close()
        self._process.wait(timeout=30)
        self._stderr.close()
        return self.log.read_text()


def request(secret: str = SECRET, *, when: datetime | None = None, path: str = "/episodes/site-a/ep.mcap"):
    """What the proxy hands the authenticator for a ranged GET signed by our signer: (string-to-sign,
    signature). The string-to-sign is rebuilt from the request's headers, as the proxy does."""
    when = when or datetime.now(UTC)
    added = sigv4.sign(
        "GET",
        HOST,
        path,
        credentials=sigv4.Credentials(KEY_ID, secret),
        now=when,
        headers={"Range": "bytes=0-1048575"},
    )
    received = {
        "Host": HOST,
        "Range": "bytes=0-1048575",
        **{k: v for k, v in added.items() if k != "Authorization"},
    }
    canonical = sigv4.canonical_request(
        "GET", path, headers=received, payload_sha256=added["x-amz-content-sha256"]
    )
    to_sign = sigv4.string_to_sign(canonical, amz_date=added["x-amz-date"])
    return to_sign, added["Authorization"].rpartition("Signature=")[2]


def botocore_request(secret: str = SECRET) -> tuple[str, str]:
    """The same from botocore's S3 signer: its own string-to-sign, its own signature."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    class Recording(S3SigV4Auth):
        def signature(self, string_to_sign, request):
            self.string_to_sign = string_to_sign
            return super().signature(string_to_sign, request)

    signer = Recording(Credentials(KEY_ID, secret), "s3", "eu-central-1")
    request = AWSRequest(method="GET", url=f"http://{HOST}/episodes/a%20b.mcap?partNumber=1", data=b"")
    signer.add_auth(request)
    return signer.string_to_sign, request.headers["Authorization"].rpartition("Signature=")[2]


def with_line(string_to_sign: str, index: int, value: str) -> str:
    lines = string_to_sign.split("\n")
    lines[index] = value
    return "\n".join(lines)


def write_credentials(path: Path, text: str, mode: int = 0o600) -> None:
    # As Ansible's copy and template write: a new file renamed over the old one.
    temporary = path.with_name(path.name + ".new")
    temporary.write_text(text)
    temporary.chmod(mode)
    os.replace(temporary, path)


def test_the_authenticator_accepts_valid_signatures_only(classpath, tmp_path) -> None:
    credentials = tmp_path / "s3-credentials.properties"
    # readable by others: served all the same, with a warning
    write_credentials(credentials, f"# megahour S3 keys\n{KEY_ID}={SECRET}\nOTHERKEY=another-secret\n", 0o644)
    proxy = Proxy(classpath, credentials, tmp_path / "proxy.log")
    now = datetime.now(UTC)
    try:
        valid, signature = request()
        assert proxy.ask(KEY_ID, valid, signature) == "accept"
        assert proxy.ask(KEY_ID, *botocore_request()) == "accept"
        # another key's secret, and a key the file does not have
        assert proxy.ask(KEY_ID, *request("another-secret")) == "reject"
        assert proxy.ask("NOSUCHKEY", valid, signature) == "reject"
        # what the proxy passes for a V2 signature or an unsigned request
        assert proxy.ask(KEY_ID, "", "") == "reject"
        assert proxy.ask(KEY_ID, "", signature) == "reject"
        # outside the 15 minutes the proxy's clock allows
        assert proxy.ask(KEY_ID, *request(when=now - timedelta(minutes=20))) == "reject"
        assert proxy.ask(KEY_ID, *request(when=now + timedelta(minutes=20))) == "reject"
        assert proxy.ask(KEY_ID, *request(when=now - timedelta(minutes=10))) == "accept"
        # a scope for another day than x-amz-date's, signed with that day's key: only the dates disagree
        other_day = (now - timedelta(days=1)).strftime("%Y%m%d")
        shifted = with_line(valid, 2, f"{other_day}/us-east-1/s3/aws4_request")
        assert proxy.ask(KEY_ID, shifted, sigv4.signature(SECRET, shifted)) == "reject"
        # a request changed on the way: the proxy's hash of it differs from the signed one
        tampered_hash = "0" * 64 if valid.split("\n")[3] != "0" * 64 else "1" * 64
        assert proxy.ask(KEY_ID, with_line(valid, 3, tampered_hash), signature) == "reject"
        # the wrong algorithm, a scope of another service, a signature that is not hex
        assert proxy.ask(KEY_ID, with_line(valid, 0, "AWS4-HMAC-SHA512"), signature) == "reject"
        scope_iam = with_line(valid, 2, valid.split("\n")[2].replace("/s3/", "/iam/"))
        assert proxy.ask(KEY_ID, scope_iam, sigv4.signature(SECRET, scope_iam)) == "reject"
        assert proxy.ask(KEY_ID, valid, signature.upper()) == "reject"
        assert proxy.ask(KEY_ID, valid, "") == "reject"
        assert proxy.ask(KEY_ID, valid, signature) == "accept"  # nothing above broke the cached state
    finally:
        log = proxy.close()
    reasons = [
        "unknown access id",
        "no SigV4 string-to-sign",
        "behind the proxy's clock",
        "ahead of the proxy's clock",
        f"credential scope date {other_day} is not x-amz-date's date",
        "algorithm AWS4-HMAC-SHA512 is not AWS4-HMAC-SHA256",
        "malformed credential scope",
        "signature mismatch",
    ]
    for reason in reasons:
        assert reason in log, reason
    assert f"{credentials} is readable by every user of this host" in log
    rejections = [line for line in log.splitlines() if "S3 request rejected" in line]
    assert len(rejections) == 12 and all(" WARN " in line for line in rejections)
    assert all(f"access id {KEY_ID}:" in line for line in rejections if "NOSUCHKEY" not in line)
    assert SECRET not in log and "another-secret" not in log and signature not in log


def test_a_rotated_key_works_without_a_restart_and_a_missing_file_rejects_all(classpath, tmp_path) -> None:
    credentials = tmp_path / "s3-credentials.properties"
    write_credentials(credentials, f"{KEY_ID}={SECRET}\n")
    proxy = Proxy(classpath, credentials, tmp_path / "proxy.log")
    rotated = SECRET[::-1]  # the same length: the file's size does not change
    try:
        old = request()
        assert proxy.ask(KEY_ID, *old) == "accept"
        write_credentials(credentials, f"{KEY_ID}={rotated}\n")
        assert proxy.ask(KEY_ID, *request(rotated)) == "accept"
        assert proxy.ask(KEY_ID, *old) == "reject"
        # rewritten in place (same inode and size, a later modification time)
        credentials.write_text(f"{KEY_ID}={SECRET}\n")
        stamp = credentials.stat().st_mtime_ns + 1_000_000_000
        os.utime(credentials, ns=(stamp, stamp))
        assert proxy.ask(KEY_ID, *old) == "accept"

        credentials.unlink()
        assert proxy.ask(KEY_ID, *old) == "reject"  # fails closed, not on what it read before
        write_credentials(credentials, f"{KEY_ID}={SECRET}\n")
        assert proxy.ask(KEY_ID, *old) == "accept"
    finally:
        log = proxy.close()
    assert f"credentials file {credentials} does not exist; every request is rejected" in log
    assert "readable by every user" not in log
    assert SECRET not in log and rotated not in log


def test_missing_credentials_file_from_the_start_and_a_wider_clock_window(classpath, tmp_path) -> None:
    missing = Proxy(classpath, tmp_path / "absent.properties", tmp_path / "missing.log")
    try:
        assert missing.ask(KEY_ID, *request()) == "reject"
    finally:
        assert "absent.properties does not exist" in missing.close()

    credentials = tmp_path / "s3-credentials.properties"
    write_credentials(credentials, f"{KEY_ID}={SECRET}\n")
    wide = Proxy(classpath, credentials, tmp_path / "wide.log", "-Dmegahour.s3.max.clock.skew.seconds=3600")
    try:
        assert wide.ask(KEY_ID, *request(when=datetime.now(UTC) - timedelta(minutes=20))) == "accept"
        assert wide.ask(KEY_ID, *request(when=datetime.now(UTC) - timedelta(minutes=70))) == "reject"
    finally:
        wide.close()


def test_the_pom_pins_its_plugins_and_resolves_no_transitive_dependencies() -> None:
    import xml.etree.ElementTree as ET

    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    pom = ET.parse(PROJECT / "pom.xml").getroot()
    for plugin in pom.iterfind("m:build/m:plugins/m:plugin", ns):
        assert plugin.findtext("m:version", namespaces=ns), plugin.findtext("m:artifactId", namespaces=ns)
    for dependency in pom.iterfind("m:dependencies/m:dependency", ns):
        assert dependency.findtext("m:scope", namespaces=ns) == "provided"
        exclusions = dependency.findall("m:exclusions/m:exclusion", ns)
        assert [
            (e.findtext("m:groupId", namespaces=ns), e.findtext("m:artifactId", namespaces=ns))
            for e in exclusions
        ] == [("*", "*")]
    assert (REPO / ".gitignore").read_text().count("roles/alluxio/files/s3-authenticator/target/") == 1
