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


def spark_ddl(schema: pa.Schema) -> str:
    """Spark DDL for an Arrow schema, e.g. ``"`time` int, `speed` int"``."""
    cols = []
    for field in schema:
        for test, name in _SIMPLE:
            if test(field.type):
                cols.append(f"`{field.name}` {name}")
                break
        else:
            raise ConfigError(f"column {field.name!r}: Arrow type {field.type} is not supported")
    return ", ".join(cols)


def spark_compatible(schema: pa.Schema) -> pa.Schema:
    """The Arrow schema that Spark expects batches in for :func:`spark_ddl` of ``schema``.

    Spark declares every column nullable, wants ``string`` rather than
    ``large_string`` and UTC timestamps in microseconds; it checks the first batch
    against this exactly.
    """
    fields = []
    for field in schema:
        t = field.type
        if pa.types.is_large_string(t):
            t = pa.string()
        elif pa.types.is_timestamp(t):
            t = pa.timestamp("us", tz="UTC")
        fields.append(pa.field(field.name, t, nullable=True))
    return pa.schema(fields)
