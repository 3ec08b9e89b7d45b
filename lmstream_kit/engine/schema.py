"""Arrow <-> Spark schema conversion for the ``lmstream`` source."""

from __future__ import annotations

import pyarrow as pa

from ..exceptions import ConfigError

_SIMPLE = [
    (pa.types.is_boolean, "boolean"),
    (pa.types.is_int8, "tinyint"),
    (pa.types.is_int16, "smallint"),
    (pa.types.is_int32, "int"),
    (pa.types.is_int64, "bigint"),
    (pa.types.is_float32, "float"),
    (pa.types.is_float64, "double"),
    (pa.types.is_string, "string"),
    (pa.types.is_large_string, "string"),
    (pa.types.is_date32, "date"),
    (pa.types.is_timestamp, "timestamp"),
    (pa.types.is_binary, "binary"),
]


def _ddl_type(t: pa.DataType) -> str | None:
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = _ddl_type(t.value_type)
        return None if item is None else f"array<{item}>"
    return next((name for test, name in _SIMPLE if test(t)), None)


def spark_ddl(schema: pa.Schema) -> str:
    """Spark DDL for an Arrow schema, e.g. ``"`time` int, `speed` int"`` (lists become arrays).

    >>> spark_ddl(pa.schema([("time", pa.int32()), ("ids", pa.list_(pa.int64()))]))
    '`time` int, `ids` array<bigint>'
    """
    cols = []
    for field in schema:
        name = _ddl_type(field.type)
        if name is None:
            raise ConfigError(f"column {field.name!r}: Arrow type {field.type} is not supported")
        cols.append(f"`{field.name}` {name}")
    return ", ".join(cols)


def _compatible_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC")
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(pa.field("element", _compatible_type(t.value_type), nullable=True))
    return t


def spark_compatible(schema: pa.Schema) -> pa.Schema:
    """The Arrow schema that Spark expects batches in for :func:`spark_ddl` of ``schema``.

    Spark declares every column nullable, wants ``string`` rather than
    ``large_string``, UTC timestamps in microseconds and list items named ``element``;
    it checks the first batch against this exactly.
    """
    return pa.schema([pa.field(field.name, _compatible_type(field.type), nullable=True) for field in schema])
