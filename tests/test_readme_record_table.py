"""The README's table of the metrics record is fields_markdown()'s output, so it cannot drift."""

from __future__ import annotations

from pathlib import Path

from lmstream_kit.record import fields_markdown

README = Path(__file__).resolve().parents[1] / "README.md"
MARKER = "<!-- generated from lmstream_kit.record.FIELD_DOCS:"


def test_readme_holds_the_record_table_verbatim():
    text = README.read_text(encoding="utf-8")
    table = fields_markdown()
    assert table in text, (
        "README.md's metrics record table differs from lmstream_kit.record.fields_markdown(); "
        'regenerate it with: python -c "from lmstream_kit.record import fields_markdown; '
        'print(fields_markdown())"'
    )
    # the table is the one right after its generator comment
    assert MARKER in text, "README.md lost the comment that says how its record table is generated"
    after = text.split(MARKER, 1)[1].split("\n", 1)[1]
    assert after.startswith(table + "\n")
