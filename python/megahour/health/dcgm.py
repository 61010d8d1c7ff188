"""DCGM's short diagnostic (``dcgmi diag -r 1 -j``): parse its JSON, judge it, run it.

Where DCGM is installed, the Epilog (or a timer) runs the level-1 diagnostic with a time budget.
Where it is not (no ``dcgmi``, no host engine, no NVVS), the result is a visible skip: WARN
``dcgm_absent`` or ``dcgm_unreachable``, never a silent pass and never a drain. Parsing and
judging are pure (text in, :class:`DiagResult` / :class:`~megahour.health.verdict.Verdict` out);
only :func:`run` touches a process, through a ``probes.run_any``-compatible runner.

JSON shapes read (``dcgmi/Diag.cpp`` and ``nvvs/include/NvvsJsonStrings.h`` in NVIDIA/DCGM):

* 2.x to 3.x: everything under ``"DCGM GPU Diagnostic"``; ``test_categories[].tests[].results[]``,
  a result carrying ``gpu_ids`` (through 3.2: a string such as ``"0"``) or ``gpu_id`` (3.3: a
  string, a number on Deployment results), ``status``, ``warnings`` (a string through 3.2; from
  3.3 a list of ``{"warning", "error_id", "error_category", "error_severity"}`` objects, spelt
  ``"warnings"`` and with ``null`` holes on Deployment results) and ``info`` (a string).
  Deployment tests have one result, often without any GPU id.
* 4.x: the root is ``"DCGM Diagnostic"``; a result names its entity (``entity_group`` "GPU" or
  "CPU", ``entity_id``), ``warnings`` is a list of objects, ``info`` a list of strings, and each
  test has a ``test_summary`` whose status can be ``Fail`` while every GPU's result reads
  ``Pass`` (errors with no entity, e.g. the pcie child-process failure in NVIDIA/DCGM#253), so
  the summary is an entry of its own. ``metadata`` and ``entity_groups`` sit beside the root.
* NVVS's own output (the same tree, upper-case ``PASS``, comma lists in ``gpu_ids``, ``null``
  holes in arrays), ``--iterations`` output (``{"iterations": [...], "Overall Result": ...}``),
  and the failure document (``{"DCGM ...": {"version": ..., "runtime_error": ...}}``).

Every result entry is kept: a multi-GPU result list is never reduced to ``results[0]``.
``dcgmi diag -j`` prints a DCGM warning as ``Fail`` (2.x and 3.x map all but Pass and Skip to
Fail; 4.x shows ``Warn`` only in the text table), so ``Warn`` is handled but rarely seen.

Without ``--host``, ``dcgmi diag`` falls back to an embedded host engine when ``nv-hostengine``
is not running (``StartDiag::DoExecuteConnectionFailure``), so a stopped service usually still
runs the diagnostic; ``dcgm_unreachable`` is what is left when that fails too.

Exit status: ``dcgmi`` returns its ``dcgmReturn_t``, a small negative number, so the shell sees
the low eight bits (``dcgm_structs.h``; DCGM's own ``test_plugin_sanity.py`` expects 226 as
"the lower 8 bits of -30/DCGM_ST_NVVS_ERROR"):

* 0: the diagnostic ran and reported no error.
* 226 (-30, ``DCGM_ST_NVVS_ERROR``): it ran and reported an error; the JSON is printed.
* 205 (-51, ``DCGM_ST_NVVS_ISOLATE_ERROR``): it ran and reported an error whose priority is
  ISOLATE ("cannot perform workload, GPU should be isolated"); the JSON is printed. facebookresearch/gcm
  lists 205 as non-fatal, meaning "parse the JSON anyway", not "healthy".
* 235 (-21, connection not valid): no host engine; 204 (-52): the NVVS binary is not installed;
  217 (-39) a diagnostic is already running; 202 (-54) the host engine is paused. Anything else
  means the diagnostic did not complete.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from megahour.health.probes import ProbeError
from megahour.health.verdict import Status, Verdict

CHECK = "dcgm_diag"
COMMAND = ["dcgmi", "diag", "-r", "1", "-j"]

# Root keys: 2.x/3.x, 4.x.
ROOTS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")

PASS, FAIL, WARN, SKIP, NOT_RUN = "Pass", "Fail", "Warn", "Skip", "Not Run"
_STATUS_WORDS = {
    "pass": PASS,
    "passed": PASS,
    "fail": FAIL,
    "failed": FAIL,
    "warn": WARN,
    "warning": WARN,
    "skip": SKIP,
    "skipped": SKIP,
    "not run": NOT_RUN,
    "notrun": NOT_RUN,
}

# dcgmReturn_t values (dcgm_structs.h) as the shell sees them, for messages and decisions.
RC_NVVS_ERROR = 226  # -30: the diagnostic ran and reported an error
RC_NVVS_ISOLATE_ERROR = 205  # -51: ... an error that asks to isolate the GPU
RC_CONNECTION_NOT_VALID = 235  # -21
RC_NVVS_BINARY_NOT_FOUND = 204  # -52
RC_DIAG_ALREADY_RUNNING = 217  # -39
RC_PAUSED = 202  # -54
RETURN_CODES = {
    0: "DCGM_ST_OK",
    255: "DCGM_ST_BADPARAM",
    254: "command line error",
    250: "DCGM_ST_NOT_SUPPORTED",
    249: "DCGM_ST_INIT_ERROR",
    245: "DCGM_ST_TIMEOUT",
    244: "DCGM_ST_VER_MISMATCH",
    242: "DCGM_ST_NO_DATA",
    239: "DCGM_ST_NO_PERMISSION",
    RC_CONNECTION_NOT_VALID: "DCGM_ST_CONNECTION_NOT_VALID",
    233: "DCGM_ST_GROUP_INCOMPATIBLE",
    227: "DCGM_ST_REQUIRES_ROOT",
    RC_NVVS_ERROR: "DCGM_ST_NVVS_ERROR",
    RC_DIAG_ALREADY_RUNNING: "DCGM_ST_DIAG_ALREADY_RUNNING",
    RC_NVVS_ISOLATE_ERROR: "DCGM_ST_NVVS_ISOLATE_ERROR",
    RC_NVVS_BINARY_NOT_FOUND: "DCGM_ST_NVVS_BINARY_NOT_FOUND",
    203: "DCGM_ST_NVVS_KILLED",
    RC_PAUSED: "DCGM_ST_PAUSED",
    200: "DCGM_ST_NVML_NOT_LOADED",
    198: "DCGM_ST_NVVS_NO_AVAILABLE_TEST",
}

# What dcgmi prints when it cannot reach a host engine (dcgmi/Command.cpp, dcgmi/Diag.cpp):
# with --host; a command's connection failure; 3.x/4.x and 2.x's failed embedded-engine fallback.
_UNREACHABLE = re.compile(
    r"unable to establish a connection to the specified host"
    r"|unable to connect to host engine"
    r"|unable to start an embedded host engine"
    r"|host engine connection invalid",
    re.IGNORECASE,
)

_MAX_TEXT = 4_000_000  # bytes of output read; level 1 prints a few KiB
_MAX_DECODE_ATTEMPTS = 64  # '{' positions tried before giving up on finding the document
_MAX_EVIDENCE = 32  # failing entries listed in a verdict's evidence


@dataclass(frozen=True)
class DiagEntry:
    """One result line: a test's result for one entity, or (4.x) the test's own summary."""

    category: str
    test: str
    gpu_id: str | None  # as dcgmi prints it ("3", or "0,1,2,3" from NVVS); None: no GPU named
    status: str  # Pass, Fail, Warn, Skip, Not Run, or the unrecognised word itself
    detail: str = ""  # warnings and info, joined
    entity: str | None = None  # "GPU", "CPU", ...; None when the result names no entity
    entity_id: str | None = None
    summary: bool = False  # DCGM 4.x's test_summary, not a per-entity result

    @property
    def where(self) -> str:
        """Human words for the entity: ``GPU 3``, ``CPU 0``, or what a summary covers."""
        if self.summary:
            return "test summary"
        if self.entity and self.entity_id is not None:
            return f"{self.entity} {self.entity_id}"
        return "no GPU named"

    def to_evidence(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "test": self.test,
            "gpu": self.gpu_id,
            "where": self.where,
            "status": self.status,
            "detail": self.detail[:300],
        }


@dataclass(frozen=True)
class DiagResult:
    """What ``dcgmi diag -j`` said. ``errors`` lists what could not be read; parsing never raises."""

    tests: tuple[DiagEntry, ...] = ()
    errors: tuple[str, ...] = ()
    runtime_error: str | None = None  # the failure document: the diagnostic did not complete
    version: str | None = None
    overall: str | None = None  # "Overall Result" of an --iterations run
    notes: tuple[str, ...] = ()  # text around the JSON (e.g. a connection error)


def normalize_status(raw: object) -> str:
    """Pass/Fail/Warn/Skip/Not Run whatever the case; an unknown word is returned as it came."""
    word = str(raw).strip() if raw is not None else ""
    return _STATUS_WORDS.get(word.lower(), word)


def _text(value: object) -> str:
    """warnings/info as one string: a string, a list of strings, or a list of warning objects."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, dict):
        for key in ("warning", "warnings", "msg", "message"):
            if key in value:
                return _text(value[key])
        return ""
    if isinstance(value, list):
        return "; ".join(part for part in (_text(v) for v in value) if part)
    return str(value)


def _id(value: object) -> str | None:
    if value is None or isinstance(value, (dict, list)):
        return None
    text = str(value).strip()
    return text or None


def _entry(category: str, test: str, result: dict[str, Any], summary: bool = False) -> DiagEntry:
    entity: str | None = None
    entity_id: str | None = None
    if "entity_id" in result or "entity_group" in result:
        entity = _id(result.get("entity_group")) or "GPU"
        entity_id = _id(result.get("entity_id"))
    else:
        entity_id = _id(result.get("gpu_id", result.get("gpu_ids")))
        entity = "GPU" if entity_id is not None else None
    detail = "; ".join(p for p in (_text(result.get("warnings")), _text(result.get("info"))) if p)
    return DiagEntry(
        category=category,
        test=test,
        gpu_id=entity_id if entity == "GPU" else None,
        status=normalize_status(result.get("status")),
        detail=detail,
        entity=entity,
        entity_id=entity_id,
        summary=summary,
    )


def _walk_root(root: object, where: str, tests: list[DiagEntry], errors: list[str]) -> str | None:
    """Collect the entries under one ``DCGM (GPU) Diagnostic`` object; returns its runtime_error."""
    if not isinstance(root, dict):
        errors.append(f"{where}: not an object")
        return None
    runtime_error = root.get("runtime_error")
    categories = root.get("test_categories")
    if categories is None:
        if runtime_error is None:
            errors.append(f"{where}: no test_categories")
        return _text(runtime_error) or None
    if not isinstance(categories, list):
        errors.append(f"{where}: test_categories is not a list")
        return _text(runtime_error) or None
    for c_index, category in enumerate(categories):
        if category is None:
            continue  # NVVS leaves null holes in arrays
        if not isinstance(category, dict) or not isinstance(category.get("tests"), list):
            errors.append(f"{where}: category {c_index} has no tests list")
            continue
        cat_name = str(category.get("category") or "?")
        for t_index, test in enumerate(category["tests"]):
            if test is None:
                continue
            if not isinstance(test, dict):
                errors.append(f"{where}: {cat_name} test {t_index} is not an object")
                continue
            name = str(test.get("name") or f"test {t_index}")
            results = test.get("results")
            summary = test.get("test_summary")
            if results is None and summary is None:
                # 4.x writes a test whose every entity was not run as its name alone.
                tests.append(DiagEntry(cat_name, name, None, NOT_RUN, summary=True))
                continue
            if results is not None and not isinstance(results, list):
                errors.append(f"{where}: {cat_name}/{name}: results is not a list")
                results = None
            for r_index, result in enumerate(results or []):
                if result is None:
                    continue
                if not isinstance(result, dict):
                    errors.append(f"{where}: {cat_name}/{name} result {r_index} is not an object")
                    continue
                if "status" not in result:
                    errors.append(f"{where}: {cat_name}/{name} result {r_index} has no status")
                    continue
                tests.append(_entry(cat_name, name, result))
            if summary is not None:
                if isinstance(summary, dict) and "status" in summary:
                    tests.append(_entry(cat_name, name, summary, summary=True))
                else:
                    errors.append(f"{where}: {cat_name}/{name}: test_summary has no status")
    return _text(runtime_error) or None


def _documents(text: str) -> Iterator[tuple[int, int, object]]:
    """JSON values in ``text`` that start at a ``{``, as (start, end, value); skips what won't decode."""
    decoder = json.JSONDecoder()
    position, attempts = 0, 0
    while attempts < _MAX_DECODE_ATTEMPTS:
        start = text.find("{", position)
        if start < 0:
            return
        attempts += 1
        try:
            value, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            position = start + 1
            continue
        yield start, end, value
        position = end


def _version(doc: dict[str, Any]) -> str | None:
    for holder in (doc.get("metadata"), *(doc.get(root) for root in ROOTS)):
        if isinstance(holder, dict) and holder.get("version") is not None:
            return _id(holder.get("version"))
    return None


def parse_diag_json(text: str) -> DiagResult:
    """The document ``dcgmi diag -j`` printed, as entries; never raises, reports trouble in ``errors``.

    dcgmi may print text before the JSON (NVVS warnings, "Successfully ran diagnostic for group.",
    a connection error before an embedded-engine fallback), so the first object with a DCGM
    diagnostic root is taken and the lines outside it are kept as ``notes``.
    """
    if not isinstance(text, str):
        return DiagResult(errors=(f"output is {type(text).__name__}, not text",))
    text = text[:_MAX_TEXT]
    tests: list[DiagEntry] = []
    errors: list[str] = []
    doc: dict[str, Any] | None = None
    span = (0, 0)
    for start, end, value in _documents(text):
        if isinstance(value, dict) and (any(k in value for k in ROOTS) or "iterations" in value):
            if text[end:].lstrip()[:1] in (",", "]", "}"):
                # An element of a larger document that did not decode (output cut short, e.g. one
                # iteration of several): reading it alone would pass a run nobody saw finish.
                return DiagResult(errors=("the diagnostic JSON is truncated",))
            doc, span = value, (start, end)
            break
    outside = text[: span[0]] + "\n" + text[span[1] :] if doc is not None else text
    notes = tuple(line.strip() for line in outside.splitlines() if line.strip())[:20]
    if doc is None:
        stripped = text.strip()
        if not stripped:
            reason = "no output"
        elif "{" in stripped:
            reason = "no DCGM diagnostic JSON object in the output"
        else:
            reason = "output is not JSON (was -j given?)"
        return DiagResult(errors=(reason,), notes=notes)

    runtime_errors: list[str] = []
    if "iterations" in doc:
        iterations = doc.get("iterations")
        if not isinstance(iterations, list) or not iterations:
            errors.append("iterations is not a non-empty list")
        else:
            for index, run in enumerate(iterations):
                root = next((run[k] for k in ROOTS if isinstance(run, dict) and k in run), None)
                message = _walk_root(root, f"iteration {index}", tests, errors)
                if message:
                    runtime_errors.append(message)
    else:
        for key in ROOTS:
            if key in doc:
                message = _walk_root(doc[key], key, tests, errors)
                if message:
                    runtime_errors.append(message)
    overall = doc.get("Overall Result")
    if overall is not None and doc.get("Warning"):
        runtime_errors.append(_text(doc.get("Warning")))
    if not tests and not runtime_errors and not errors:
        errors.append("the diagnostic document holds no results")
    return DiagResult(
        tests=tuple(tests),
        errors=tuple(errors),
        runtime_error="; ".join(runtime_errors) or None,
        version=_version(doc),
        overall=_id(overall),
        notes=notes,
    )


def absent_verdict(why: str, reason: str = "dcgm_absent") -> Verdict:
    """A visible skip where DCGM is missing or unreachable: WARN, so the gate passes and nobody drains.

    ``reason`` is ``dcgm_absent`` (no dcgmi or no NVVS) or ``dcgm_unreachable`` (no host engine).
    """
    return Verdict(CHECK, Status.WARN, reason, f"DCGM diagnostic skipped: {why}", {"skipped": True})


def _gpu_order(gpu_id: str) -> tuple[int, int, str]:
    """GPU 2 before GPU 10; ids that are not numbers ("0,1,2") after them."""
    numeric = gpu_id.isascii() and gpu_id.isdigit() and len(gpu_id) < 10
    return (0, int(gpu_id), "") if numeric else (1, 0, gpu_id)


def _rc_name(returncode: int) -> str:
    if returncode < 0:
        return f"killed by signal {-returncode}"
    return RETURN_CODES.get(returncode, f"exit status {returncode}")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def verdict(result: DiagResult, returncode: int, stderr: str = "") -> Verdict:
    """The gate's reading of one ``dcgmi diag`` run.

    Any Fail (a GPU's result, or a 4.x test summary) is FAIL ``dcgm_diag_failed``; an exit status
    of 205 is FAIL too, since DCGM asks for isolation. Output that cannot be read, or a diagnostic
    that did not complete, is UNKNOWN (fail closed). Warn only, or exit 226 with no result
    reading Fail, is WARN. No host engine, no NVVS, or a diagnostic already running is a WARN
    skip: those are facts about DCGM, not about the GPUs.
    """
    stderr = stderr if isinstance(stderr, str) else ""
    rc_name = _rc_name(returncode)
    base: dict[str, Any] = {"returncode": returncode, "returncode_name": rc_name, "version": result.version}
    entity_results = [e for e in result.tests if not e.summary]
    failed = [e for e in result.tests if e.status == FAIL]
    failing_tests = {(e.category, e.test) for e in failed if not e.summary}
    # A summary Fail adds a line only where no entity of that test failed (errors with no entity).
    failed = [e for e in failed if not e.summary or (e.category, e.test) not in failing_tests]

    if failed:
        first = failed[0]
        gpus = sorted({e.gpu_id for e in failed if e.gpu_id is not None}, key=_gpu_order)
        more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
        detail = f": {first.detail[:200]}" if first.detail else ""
        return Verdict(
            CHECK,
            Status.FAIL,
            "dcgm_diag_failed",
            f"{first.test} failed on {first.where}{detail}{more}",
            {
                **base,
                "failing": [e.to_evidence() for e in failed[:_MAX_EVIDENCE]],
                "failed_gpus": gpus,
                "isolate": returncode == RC_NVVS_ISOLATE_ERROR,
                "results": len(entity_results),
            },
        )

    context = " ".join((*result.notes, stderr))
    if not result.tests and (returncode == RC_CONNECTION_NOT_VALID or _UNREACHABLE.search(context)):
        why = _UNREACHABLE.search(context)
        return absent_verdict(
            f"no DCGM host engine ({why.group(0) if why else rc_name})", reason="dcgm_unreachable"
        )
    if returncode == RC_NVVS_BINARY_NOT_FOUND:
        return absent_verdict(f"dcgmi exited {returncode} ({rc_name}): DCGM's diagnostic is not installed")
    if returncode in (RC_DIAG_ALREADY_RUNNING, RC_PAUSED):
        return Verdict(
            CHECK,
            Status.WARN,
            "dcgm_diag_busy",
            f"DCGM diagnostic skipped: dcgmi exited {returncode} ({rc_name})",
            {**base, "skipped": True, "runtime_error": result.runtime_error},
        )
    if returncode == RC_NVVS_ISOLATE_ERROR:
        return Verdict(
            CHECK,
            Status.FAIL,
            "dcgm_diag_failed",
            f"dcgmi exited {returncode} ({rc_name}), the GPU should be isolated, though no result reads Fail",
            {**base, "failing": [], "failed_gpus": [], "isolate": True, "results": len(entity_results)},
        )
    if result.runtime_error is not None or returncode not in (0, RC_NVVS_ERROR):
        message = result.runtime_error or _last_line(" ".join(result.notes)) or _last_line(stderr)
        return Verdict(
            CHECK,
            Status.UNKNOWN,
            "dcgm_diag_error",
            f"the diagnostic did not complete: dcgmi exited {returncode} ({rc_name}): {message[:300]}",
            {**base, "runtime_error": result.runtime_error, "parse_errors": list(result.errors[:5])},
        )
    unknown = sorted({e.status for e in result.tests if e.status not in (PASS, FAIL, WARN, SKIP, NOT_RUN)})
    if result.errors or unknown or not result.tests:
        problems = list(result.errors[:5]) + [f"unrecognised status {s!r}" for s in unknown]
        return Verdict(
            CHECK,
            Status.UNKNOWN,
            "dcgm_diag_unparseable",
            f"dcgmi diag output could not be read: {'; '.join(problems)[:300]}",
            {**base, "parse_errors": problems, "notes": list(result.notes[:5])},
        )
    warned = [e for e in result.tests if e.status == WARN]
    if warned or returncode == RC_NVVS_ERROR:
        first_warning = warned[0] if warned else None
        message = (
            f"{first_warning.test} warned on {first_warning.where}: {first_warning.detail[:200]}"
            if first_warning
            else f"dcgmi exited {returncode} ({rc_name}) but no result reads Fail"
        )
        return Verdict(
            CHECK,
            Status.WARN,
            "dcgm_diag_warning",
            message,
            {
                **base,
                "warnings": [e.to_evidence() for e in warned[:_MAX_EVIDENCE]],
                "results": len(entity_results),
            },
        )
    counts = {
        status: sum(1 for e in entity_results if e.status == status) for status in (PASS, SKIP, NOT_RUN)
    }
    return Verdict(
        CHECK,
        Status.PASS,
        "ok",
        f"{len(entity_results)} results: {counts[PASS]} passed, {counts[SKIP]} skipped, "
        f"{counts[NOT_RUN]} not run",
        {**base, "results": len(entity_results), "passed": counts[PASS], "skipped": counts[SKIP]},
    )


Runner = Callable[[list[str], float], tuple[int, str, str]]


def run(timeout_s: float, runner: Runner) -> Verdict:
    """Run :data:`COMMAND` through ``runner`` (``probes.run_any``-compatible) and judge it.

    A missing ``dcgmi`` is a skip (WARN ``dcgm_absent``); a timeout is UNKNOWN ``probe_timeout``.
    The runner kills only ``dcgmi`` on a timeout; the host engine may still finish the diagnostic,
    and the next run then reads ``dcgm_diag_busy``.
    """
    try:
        returncode, stdout, stderr = runner(list(COMMAND), timeout_s)
    except ProbeError as exc:
        if exc.reason == "probe_timeout":
            return Verdict(
                CHECK,
                Status.UNKNOWN,
                "probe_timeout",
                str(exc),
                {"command": COMMAND, "timeout_s": timeout_s},
            )
        if isinstance(exc.__cause__, FileNotFoundError) or "not found" in str(exc):
            return absent_verdict(f"{COMMAND[0]} is not installed ({exc})")
        return Verdict(CHECK, Status.UNKNOWN, exc.reason, str(exc), {"command": COMMAND})
    except OSError as exc:
        return Verdict(CHECK, Status.UNKNOWN, "dcgm_diag_error", f"{COMMAND[0]}: {exc}", {"command": COMMAND})
    return verdict(parse_diag_json(stdout), returncode, stderr)
