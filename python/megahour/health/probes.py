"""Run the tools the checks read, each with its own timeout. Failures become verdicts."""

from __future__ import annotations

import os
import subprocess
import threading

from megahour.health import smi
from megahour.health.verdict import Status, Verdict


class ProbeError(RuntimeError):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason

    def verdict(self, check: str) -> Verdict:
        # A query that errors or times out fails closed: UNKNOWN never passes a gate.
        return Verdict(check, Status.UNKNOWN, self.reason, str(self))


def run(cmd: list[str], timeout: float) -> str:
    """stdout of ``cmd``; a non-zero exit, a timeout or a missing binary raises (fail closed)."""
    returncode, out, err = run_any(cmd, timeout, missing_reason="gpu_query_failed")
    if returncode != 0:
        detail = (err or out).strip().splitlines()
        raise ProbeError(
            "gpu_query_failed", f"{' '.join(cmd)} exited {returncode}: {detail[-1] if detail else ''}"
        )
    return out


def smi_query(nvidia_smi: str, query: str, fields: list[str], timeout: float) -> smi.CsvResult:
    """``nvidia-smi --<query>=<fields> --format=csv`` parsed, columns mapped by position."""
    out = run([nvidia_smi, f"--{query}={','.join(fields)}", "--format=csv"], timeout)
    return smi.parse_query_csv(out, fields)


def _in_thread(probe, what: str, timeout: float):
    """Run ``probe`` in a worker thread: a hung mount must not hang the gate."""
    box: dict[str, object] = {}

    def body() -> None:
        try:
            box["value"] = probe()
        except OSError as exc:
            box["error"] = exc

    worker = threading.Thread(target=body, daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise ProbeError("probe_timeout", f"{what} timed out after {timeout:g}s")
    if "error" in box:
        raise ProbeError("disk_unreadable", f"{what}: {box['error']}")
    return box["value"]


def mount_state(path: str, timeout: float) -> dict[str, bool]:
    def probe() -> dict[str, bool]:
        exists = os.path.isdir(path)
        return {
            "exists": exists,
            "is_mount": exists and os.path.ismount(path),
            "writable": exists and os.access(path, os.W_OK),
        }

    return _in_thread(probe, f"checking mount {path}", timeout)  # type: ignore[return-value]


def run_any(
    cmd: list[str], timeout: float, missing_reason: str = "container_runtime_failed"
) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``cmd``; a timeout or a missing binary raises."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError as exc:
        raise ProbeError(missing_reason, f"{cmd[0]} not found") from exc
    except subprocess.TimeoutExpired as exc:
        raise ProbeError("probe_timeout", f"{' '.join(cmd)} timed out after {timeout:g}s") from exc
    return proc.returncode, proc.stdout, proc.stderr


def free_percent(path: str, timeout: float) -> float:
    """statvfs in a worker thread: a hung mount must not hang the gate."""

    def probe() -> float:
        st = os.statvfs(path)
        return 100.0 * st.f_bavail / st.f_blocks if st.f_blocks else 0.0

    return float(_in_thread(probe, f"statvfs({path})", timeout))  # type: ignore[arg-type]
