"""Typed curation errors: each names the thing that is wrong and the fix."""

from __future__ import annotations


class CurationError(Exception):
    """Base class for warehouse and manifest errors."""


class WarehouseError(CurationError):
    """The warehouse cannot be reached or is misconfigured."""


class QueryError(CurationError):
    """A query failed; carries the query text and the server's message."""

    def __init__(self, query: str, message: str) -> None:
        self.query = query
        self.message = message.strip()
        shown = query.strip()
        if len(shown) > 2000:
            shown = shown[:2000] + " ..."
        super().__init__(f"query failed: {self.message}\n--- query ---\n{shown}")


class EmptySelectionError(CurationError):
    """The selection matched no rows; no manifest is written."""


class SchemaDriftError(CurationError):
    """The table's columns differ from the schema megahour writes and reads."""

    def __init__(self, table: str, missing: list[str], unexpected: list[str], retyped: list[str]) -> None:
        self.table, self.missing, self.unexpected, self.retyped = table, missing, unexpected, retyped
        parts = []
        if missing:
            parts.append(f"missing columns {', '.join(missing)}")
        if unexpected:
            parts.append(f"unexpected columns {', '.join(unexpected)}")
        if retyped:
            parts.append(f"columns with another type: {', '.join(retyped)}")
        hint = ""
        if missing and unexpected:
            hint = " (renamed? ALTER TABLE ... RENAME COLUMN them back)"
        super().__init__(
            f"table {table} does not match the episodes schema: {'; '.join(parts)}{hint}; "
            "migrate the table or point megahour at the right one (--table)"
        )


class ManifestError(CurationError):
    """A manifest file is malformed, unverified or does not match its embedded hash."""
