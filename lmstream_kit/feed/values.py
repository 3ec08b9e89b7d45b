"""The values of a topic's records, in the workload's schema: JSON objects or Avro records.

Three formats, named in a Kafka feed's URI (``kafka://HOST:PORT/TOPIC?format=avro``):

- ``json`` (the default): one JSON object per record, its keys the workload's columns
  (timestamps as epoch seconds or ISO text without a zone, read as UTC);
- ``avro``: one Avro binary record per value, written with the workload's schema as
  :func:`avro_schema` gives it, without a header: what Spark's ``to_avro`` writes and its
  ``from_avro`` reads;
- ``avro-confluent``: Confluent's wire format, as producers with a schema registry write it: the
  magic byte 0, a 4-byte schema id, then the Avro binary.  The kit has no registry: the schema id
  is not looked up, and the records must be written with the workload's schema (a record written
  with another one is rejected where its bytes do not fit, never misread silently where they
  leave bytes over).  The kit's own generator does not write this format.

A value that does not fit is rejected with its index and a reason, one line, and never stops the
stream (the source writes it to the dead-letter file).

>>> schema = pa.schema([pa.field("x", pa.int32(), nullable=False), pa.field("s", pa.string())])
>>> avro_schema(schema)["fields"]
[{'name': 'x', 'type': 'int'}, {'name': 's', 'type': ['null', 'string'], 'default': None}]
>>> values = encode_values(pa.table({"x": [1, 2], "s": ["a", None]}, schema=schema), "avro")
>>> values
[b'\\x02\\x02\\x02a', b'\\x04\\x00']
>>> table, bad = decode_values([*values, b'\\x02', b'\\x02\\x00\\x00'], schema, "avro")
>>> table.to_pylist(), bad
([{'x': 1, 's': 'a'}, {'x': 2, 's': None}], [(2, 'not an Avro record of the schema: it ends early'), (3, 'not an Avro record of the schema: 1 byte(s) left over')])
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from ..exceptions import ConfigError, one_line
from .validate import _array_of, _convert_python, _Rejects, apply_checks

__all__ = ["FORMATS", "WRITABLE", "avro_schema", "decode_json", "decode_values", "encode_json", "encode_values",
           "check_format"]

FORMATS = ("json", "avro", "avro-confluent")
WRITABLE = ("json", "avro")  # what the kit's generator writes
_CONFLUENT_HEADER = 5  # magic byte 0 and a 4-byte schema id


def check_format(fmt: Any, *, writing: bool = False) -> str:
    """``fmt`` if it is a value format (one the generator writes, with ``writing``); ConfigError otherwise."""
    if fmt not in FORMATS:
        raise ConfigError(f"a topic's value format is one of {', '.join(FORMATS)}, got {fmt!r}")
    if writing and fmt not in WRITABLE:
        raise ConfigError(f"the kit's generator writes {' or '.join(WRITABLE)} values, not {fmt!r} "
                          "(it has no schema registry to take a schema id from)")
    return fmt


# ---------------------------------------------------------------------- JSON
def _json_value(v: Any) -> Any:
    if isinstance(v, datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=timezone.utc)
        return v.timestamp()  # epoch seconds: decode_json reads them back exactly (to the microsecond)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def encode_json(table: pa.Table) -> list[bytes]:
    """One JSON object per row (timestamps as epoch seconds), the values a producer writes.

    >>> encode_json(pa.table({"x": [1, 2], "s": ["a", None]}))
    [b'{"x":1,"s":"a"}', b'{"x":2,"s":null}']
    """
    names = table.column_names
    columns = [table.column(n).to_pylist() for n in names]
    return [json.dumps({n: _json_value(c[i]) for n, c in zip(names, columns)}, separators=(",", ":")).encode()
            for i in range(table.num_rows)]


def decode_json(values: Sequence[bytes | None], schema: pa.Schema,
                checks: Mapping[str, Any] | None = None) -> tuple[pa.Table, list[tuple[int, str]]]:
    """Records' values (JSON objects) as a table of ``schema``, and the ``(index, reason)`` of each
    value that does not fit (not JSON, not an object, a missing or mistyped column, a failed check).

    >>> table, bad = decode_json([b'{"x": 1}', b'{"x": "two"}', b'[1]', None, b'{"x": 3, "y": 0}'],
    ...                          pa.schema([pa.field("x", pa.int32(), nullable=False)]))
    >>> table.column("x").to_pylist()
    [1, 3]
    >>> bad
    [(1, "column 'x': value 'two' is not int32"), (2, 'record is not a JSON object'), (3, 'record has no value')]
    """
    fast = _decode_json_arrow(values, schema, checks)
    if fast is not None:
        return fast

    def parse(raw: bytes) -> tuple[Any, str | None]:
        try:
            item = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            return None, f"invalid JSON: {one_line(exc)}"
        return (item, None) if isinstance(item, dict) else (None, "record is not a JSON object")

    return _decode_each(values, schema, checks, parse, _convert_python)


def _decode_each(values: Sequence[bytes | None], schema: pa.Schema, checks: Mapping[str, Any] | None,
                 parse: Any, convert: Any) -> tuple[pa.Table, list[tuple[int, str]]]:
    """Decode record by record: ``parse(raw) -> (dict, None) or (None, reason)``, then each column
    by ``convert(field, values, problems)``; returns the good rows and each bad one's reason."""
    records: list[dict] = []
    where: list[int] = []
    rejects: list[tuple[int, str]] = []
    for i, raw in enumerate(values):
        if raw is None:
            rejects.append((i, "record has no value"))
            continue
        item, why = parse(raw)
        if why is not None:
            rejects.append((i, why))
            continue
        records.append(item)
        where.append(i)
    problems = _Rejects()
    arrays = [convert(f, [r.get(f.name) for r in records], problems) for f in schema]
    return _checked(arrays, problems, where, rejects, schema, checks)


def _arrow_parsable(typ: pa.DataType) -> bool:
    t = pa.types
    return t.is_integer(typ) or t.is_floating(typ) or t.is_boolean(typ) or t.is_string(typ) or t.is_timestamp(typ)


def _decode_json_arrow(values: Sequence[bytes | None], schema: pa.Schema, checks: Mapping[str, Any] | None
                       ) -> tuple[pa.Table, list[tuple[int, str]]] | None:
    """:func:`decode_json` by Arrow's JSON reader, about 3x faster, where every value fits: objects
    one to a line, every column of its type (timestamps as epoch seconds), nothing missing that
    must be there.  None otherwise (and for other column types): the record-by-record reader then
    says which records do not fit, and why.  A value checks can still reject."""
    import pyarrow.compute as pc
    import pyarrow.json as pj

    if not values or not all(_arrow_parsable(f.type) for f in schema):
        return None
    if any(v is None or b"\n" in v or b"\r" in v for v in values):
        return None
    parse = pa.schema([pa.field(f.name, pa.float64() if pa.types.is_timestamp(f.type) else f.type) for f in schema])
    try:
        table = pj.read_json(io.BytesIO(b"\n".join(values)), parse_options=pj.ParseOptions(
            explicit_schema=parse, unexpected_field_behavior="ignore"))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != len(values):
        return None
    arrays = []
    for f in schema:
        col = table.column(f.name).combine_chunks() if f.name in table.column_names else None
        if col is None or (not f.nullable and col.null_count):
            return None
        if pa.types.is_timestamp(f.type):  # epoch seconds to the microsecond, as the record-by-record reader rounds
            micros = pc.round(pc.multiply(col, 1e6)).cast(pa.int64())
            col = micros.cast(pa.timestamp("us", tz=f.type.tz)).cast(f.type)
        arrays.append(col)
    return _checked(arrays, _Rejects(), list(range(len(values))), [], schema, checks)


def _checked(arrays, problems, where, rejects, schema, checks) -> tuple[pa.Table, list[tuple[int, str]]]:
    good, bad_rows = apply_checks(arrays, problems, len(where), schema, checks or {})
    rejects += [(where[i], "; ".join(problems.by_row[i])) for i in bad_rows]
    rejects.sort()
    return good, rejects


# ---------------------------------------------------------------------- Avro
def _avro_type(typ: pa.DataType, name: str) -> Any:
    t = pa.types
    if t.is_boolean(typ):
        return "boolean"
    if t.is_int8(typ) or t.is_int16(typ) or t.is_int32(typ) or t.is_uint8(typ) or t.is_uint16(typ):
        return "int"
    if t.is_int64(typ) or t.is_uint32(typ):
        return "long"
    if t.is_float32(typ):
        return "float"
    if t.is_float64(typ):
        return "double"
    if t.is_string(typ) or t.is_large_string(typ):
        return "string"
    if t.is_binary(typ) or t.is_large_binary(typ):
        return "bytes"
    if t.is_date32(typ):
        return {"type": "int", "logicalType": "date"}
    if t.is_timestamp(typ) and typ.unit in ("ms", "us"):
        return {"type": "long", "logicalType": "timestamp-millis" if typ.unit == "ms" else "timestamp-micros"}
    if t.is_list(typ) or t.is_large_list(typ):
        return {"type": "array", "items": _avro_type(typ.value_type, name)}
    raise ConfigError(f"column {name!r}: type {typ} has no Avro form here (use JSON values)")


def avro_schema(schema: pa.Schema, name: str = "Row") -> dict:
    """The Avro record schema of ``schema``: nullable columns are unions with null (default null)."""
    fields = []
    for f in schema:
        typ = _avro_type(f.type, f.name)
        fields.append({"name": f.name, "type": ["null", typ], "default": None} if f.nullable
                      else {"name": f.name, "type": typ})
    return {"type": "record", "name": name, "namespace": "lmstream_kit", "fields": fields}


_PARSED: dict[pa.Schema, Any] = {}


def _parsed(schema: pa.Schema):
    from fastavro import parse_schema

    if schema not in _PARSED:
        _PARSED[schema] = parse_schema(avro_schema(schema))
    return _PARSED[schema]


def _avro_value(v: Any) -> Any:
    if isinstance(v, datetime) and v.tzinfo is None:
        return v.replace(tzinfo=timezone.utc)
    return v


def encode_avro(table: pa.Table) -> list[bytes]:
    """One Avro binary record (of :func:`avro_schema` of the table's schema) per row."""
    from fastavro import schemaless_writer

    parsed = _parsed(table.schema)
    out = []
    for row in table.to_pylist():
        buf = io.BytesIO()
        schemaless_writer(buf, parsed, {k: _avro_value(v) for k, v in row.items()})
        out.append(buf.getvalue())
    return out


def decode_avro(values: Sequence[bytes | None], schema: pa.Schema, checks: Mapping[str, Any] | None = None, *,
                header: int = 0) -> tuple[pa.Table, list[tuple[int, str]]]:
    """Records' values (Avro binary of :func:`avro_schema` of ``schema``, after ``header`` bytes of
    Confluent's wire format where it is 5) as a table of ``schema``, and the ``(index, reason)``
    of each value that does not fit."""
    from fastavro import schemaless_reader

    parsed = _parsed(schema)

    def parse(raw: bytes) -> tuple[Any, str | None]:
        if header and (len(raw) < header or raw[0] != 0):
            return None, "no Confluent wire-format header (magic byte 0 and a schema id)"
        buf = io.BytesIO(raw)
        buf.seek(header)
        try:
            item = schemaless_reader(buf, parsed, None)
        except Exception as exc:  # noqa: BLE001  (bytes of another schema: too few, a bad union index, bad UTF-8)
            why = "it ends early" if isinstance(exc, EOFError) or buf.tell() >= len(raw) else one_line(exc)
            return None, f"not an Avro record of the schema: {why}"
        if buf.tell() != len(raw):
            return None, f"not an Avro record of the schema: {len(raw) - buf.tell()} byte(s) left over"
        return item, None

    return _decode_each(values, schema, checks, parse, _array_of)  # Avro checked the kinds; pyarrow the ranges


# ---------------------------------------------------------------------- by format
def encode_values(table: pa.Table, fmt: str = "json") -> list[bytes]:
    """The values a producer writes for ``table``'s rows in format ``fmt`` (``json`` or ``avro``)."""
    return encode_json(table) if check_format(fmt, writing=True) == "json" else encode_avro(table)


def decode_values(values: Sequence[bytes | None], schema: pa.Schema, fmt: str = "json",
                  checks: Mapping[str, Any] | None = None) -> tuple[pa.Table, list[tuple[int, str]]]:
    """Records' values in format ``fmt`` as a table of ``schema``, and the ``(index, reason)`` of each
    value that does not fit."""
    fmt = check_format(fmt)
    if fmt == "json":
        return decode_json(values, schema, checks)
    return decode_avro(values, schema, checks, header=_CONFLUENT_HEADER if fmt == "avro-confluent" else 0)
