"""The two warehouse targets behind one interface.

- ``EmbeddedWarehouse``: chDB, ClickHouse in-process, over a directory on local disk. The default: a
  laptop or a single node needs no server.
- ``ServerWarehouse``: a ClickHouse server over its HTTP interface (the ``warehouse`` role). Results
  come back as CSV and are parsed by pyarrow, because the distribution's 18.16 server has no Arrow or
  Parquet output format; current servers take the same path.

Both return query results as Arrow tables whose schema comes from the server's own column types, so
the same SQL gives the same Arrow schema (and the same manifest bytes) on both.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pyarrow as pa

from megahour.curation.errors import QueryError, WarehouseError
from megahour.curation.schema import parse_version

CONFIG_PATH = Path("/etc/megahour/warehouse.yml")
# Refusals of the account, not of the query: unknown user (192), wrong password (193), not allowed from
# this address (195; 18.16 answers it with HTTP 500), authentication failed (516, current releases).
_AUTH_ERROR = re.compile(r"Code: (192|193|195|516)\b|Authentication failed|password is incorrect")
DEFAULT_EMBEDDED_PATH = Path("~/.local/share/megahour/warehouse")


class Warehouse(Protocol):
    url: str

    def version(self) -> tuple[int, ...]: ...

    def execute(self, sql: str) -> None: ...

    def query_json(self, sql: str) -> dict: ...

    def query_arrow(self, sql: str) -> pa.Table: ...

    def close(self) -> None: ...


def is_auth_refusal(status: int, message: str) -> bool:
    """Whether an HTTP error refuses the account (fix the credentials) rather than the query."""
    return status in (401, 403) or bool(_AUTH_ERROR.search(message))


# --- type mapping ---------------------------------------------------------------------------------

_ARROW_TYPES = {
    "String": pa.string(),
    "UInt8": pa.uint8(),
    "UInt16": pa.uint16(),
    "UInt32": pa.uint32(),
    "UInt64": pa.uint64(),
    "Int8": pa.int8(),
    "Int16": pa.int16(),
    "Int32": pa.int32(),
    "Int64": pa.int64(),
    "Float32": pa.float32(),
    "Float64": pa.float64(),
}


def arrow_field(name: str, ch_type: str) -> pa.Field:
    """The Arrow field a ClickHouse column becomes in a manifest (scalars only)."""
    inner, nullable = ch_type.strip(), False
    # Peel Nullable(...) and LowCardinality(...) in whatever nesting: LowCardinality(Nullable(String)).
    while (wrapper := inner.partition("(")[0]) in ("Nullable", "LowCardinality") and inner.endswith(")"):
        nullable = nullable or wrapper == "Nullable"
        inner = inner[len(wrapper) + 1 : -1]
    arrow = _ARROW_TYPES.get(inner)
    if arrow is None:
        raise WarehouseError(
            f"column {name} has type {ch_type}, which a manifest cannot hold; select it as a scalar "
            "(toString(...), toUInt32(...) for times, arrayStringConcat(...) for arrays)"
        )
    return pa.field(name, arrow, nullable=nullable)


def result_schema(meta: list[dict]) -> pa.Schema:
    return pa.schema([arrow_field(m["name"], m["type"]) for m in meta])


def describe_sql(sql: str) -> str:
    """The query wrapped so that it returns no rows but its column names and types (JSON ``meta``)."""
    return f"SELECT * FROM (\n{strip_statement(sql)}\n) LIMIT 0"


def strip_statement(sql: str) -> str:
    """A query without trailing semicolons and blanks, so that it can be wrapped or given a FORMAT."""
    return sql.strip().rstrip(";").rstrip()


# --- embedded (chDB) --------------------------------------------------------------------------------

_CHDB_LOCK = threading.Lock()  # chDB runs one engine per process; sessions must not overlap


class EmbeddedWarehouse:
    """chDB over ``path``. One per process: chDB holds a single engine."""

    def __init__(self, path: str | Path) -> None:
        try:
            from chdb import session as chdb_session
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise WarehouseError(
                "the embedded warehouse needs chDB: pip install 'megahour[curation]'"
            ) from exc
        self.path = Path(path).expanduser()
        self.path.mkdir(parents=True, exist_ok=True)
        self.url = f"chdb:{self.path}"
        try:
            self._session = chdb_session.Session(str(self.path))
        except Exception as exc:  # chDB runs one engine per process, bound to its first path
            raise WarehouseError(
                f"cannot open the embedded warehouse at {self.path}: {exc}; chDB serves one directory per "
                "process, so open the same path everywhere in a process (or use a server)"
            ) from None

    def _run(self, sql: str, fmt: str):
        with _CHDB_LOCK:
            try:
                return self._session.query(sql, fmt)
            except Exception as exc:  # chDB raises its own error types with the server's message
                raise QueryError(sql, str(exc)) from None

    def version(self) -> tuple[int, ...]:
        return parse_version(self.query_json("SELECT version() AS v")["data"][0][0])

    def execute(self, sql: str) -> None:
        self._run(sql, "CSV")

    def query_json(self, sql: str) -> dict:
        return json.loads(self._run(sql, "JSONCompact").bytes() or b"{}")

    def query_arrow(self, sql: str) -> pa.Table:
        schema = result_schema(self.query_json(describe_sql(sql))["meta"])
        # One copy out of chDB's result buffer (its memory is freed with the result object).
        data = self._run(sql, "Arrow").bytes()
        if not data:
            return schema.empty_table()
        return pa.ipc.open_file(pa.py_buffer(data)).read_all().cast(schema)

    def close(self) -> None:
        with _CHDB_LOCK:
            self._session.close()


# --- server (HTTP) ----------------------------------------------------------------------------------


class ServerWarehouse:
    """A ClickHouse server's HTTP interface (default port 8123), basic auth."""

    def __init__(self, url: str, user: str = "default", password: str = "", timeout_s: float = 600.0) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise WarehouseError(f"warehouse URL {url!r} must look like http://HOST:8123")
        self.user = urllib.parse.unquote(parts.username) if parts.username else user
        self._password = urllib.parse.unquote(parts.password) if parts.password else password
        port = f":{parts.port}" if parts.port else ""
        self.url = f"{parts.scheme}://{parts.hostname}{port}"  # never with the password
        self.database = parts.path.strip("/") or ""
        self.timeout_s = timeout_s

    def _post(self, sql: str, fmt: str | None) -> bytes:
        query = f"{strip_statement(sql)}\nFORMAT {fmt}" if fmt else sql
        # wait_end_of_query: the server buffers the result, so an error in the middle of a long result
        # comes back as an HTTP error with its message, not as text appended to a 200 OK body.
        params = {"wait_end_of_query": "1"}
        if self.database:
            params["database"] = self.database
        request = urllib.request.Request(
            self.url + "/?" + urllib.parse.urlencode(params),
            data=query.encode(),
            method="POST",
        )
        token = base64.b64encode(f"{self.user}:{self._password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            message = exc.read().decode(errors="replace")
            if is_auth_refusal(exc.code, message):
                raise WarehouseError(
                    f"{self.url} refused user {self.user!r}: {message.strip()[:300]} (check the password "
                    "file the warehouse role wrote, /etc/megahour/warehouse.yml)"
                ) from None
            raise QueryError(sql, message) from None
        except (urllib.error.URLError, OSError) as exc:
            raise WarehouseError(
                f"cannot reach the ClickHouse server at {self.url}: {exc}; is the warehouse role deployed "
                "and clickhouse-server running (systemctl status clickhouse-server)?"
            ) from None

    def version(self) -> tuple[int, ...]:
        return parse_version(self.query_json("SELECT version() AS v")["data"][0][0])

    def execute(self, sql: str) -> None:
        self._post(sql, None)

    def query_json(self, sql: str) -> dict:
        return json.loads(self._post(sql, "JSONCompact") or b"{}")

    def query_arrow(self, sql: str) -> pa.Table:
        import pyarrow.csv as pacsv

        schema = result_schema(self.query_json(describe_sql(sql))["meta"])
        data = self._post(sql, "CSV")
        if not data:
            return schema.empty_table()
        return pacsv.read_csv(
            io.BytesIO(data),
            read_options=pacsv.ReadOptions(column_names=schema.names),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                column_types=schema,
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
                null_values=["\\N"],
            ),
        ).cast(schema)

    def close(self) -> None:
        pass


# --- resolution ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WarehouseConfig:
    url: str
    user: str = "default"
    password_file: str | None = None


def load_config(path: Path = CONFIG_PATH) -> WarehouseConfig | None:
    """The config the warehouse role renders on every node; None when absent."""
    if not path.exists():
        return None
    import yaml

    data = yaml.safe_load(path.read_text()) or {}
    if "url" not in data:
        raise WarehouseError(f"{path} has no 'url'; re-run the warehouse role or pass --warehouse")
    return WarehouseConfig(data["url"], data.get("user", "default"), data.get("password_file"))


def open_warehouse(url: str | None = None, config_path: Path = CONFIG_PATH) -> Warehouse:
    """Resolve the warehouse: ``url`` > $MEGAHOUR_WAREHOUSE > the role's config > embedded default.

    URLs: ``chdb:PATH`` for the embedded engine, ``http://HOST:8123`` for a server. A server's
    password comes from $MEGAHOUR_WAREHOUSE_PASSWORD or the config's ``password_file``.
    """
    config = None
    chosen = url or os.environ.get("MEGAHOUR_WAREHOUSE")
    if not chosen:
        config = load_config(config_path)
        chosen = config.url if config else f"chdb:{DEFAULT_EMBEDDED_PATH}"
    if chosen.startswith("chdb:"):
        return EmbeddedWarehouse(chosen[len("chdb:") :].removeprefix("//") or DEFAULT_EMBEDDED_PATH)
    if config is None and not url:
        config = load_config(config_path)
    user = config.user if config else os.environ.get("MEGAHOUR_WAREHOUSE_USER", "default")
    password = os.environ.get("MEGAHOUR_WAREHOUSE_PASSWORD")
    if password is None and config and config.password_file:
        try:
            password = Path(config.password_file).read_text().strip()
        except OSError as exc:
            raise WarehouseError(
                f"cannot read the warehouse password file {config.password_file}: {exc.strerror}; "
                "run as a user in the megahour group or set MEGAHOUR_WAREHOUSE_PASSWORD"
            ) from None
    return ServerWarehouse(chosen, user=user, password=password or "")
