"""The docs name every failover option, with the default the producers apply: the table of
docs/configuration.md and the list in docs/aio.md are held to the one declaration."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from failover_partitioner._options import OPTION_DEFAULTS, OPTION_NAMES

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _value(text: str) -> object:
    """A default as the docs write it: `None`, `"round_robin"`, 0.5, 50000 or 50,000."""
    return ast.literal_eval(text.strip().strip("`").replace(",", ""))


def test_the_configuration_table_gives_every_option_its_default() -> None:
    page = (DOCS / "configuration.md").read_text()
    table = page.split("### Options\n", 1)[1].split("\n#", 1)[0]
    documented: dict[str, object] = {}
    for row in table.splitlines():
        if not row.startswith("| `"):
            continue
        names_cell, defaults_cell = row.split("|")[1:3]
        names = re.findall(r"`(\w+)`", names_cell)
        defaults = [_value(d) for d in defaults_cell.split(", ")]
        assert len(names) == len(defaults), row
        documented.update(zip(names, defaults, strict=True))
    assert documented == dict(OPTION_DEFAULTS)


def test_the_asyncio_page_names_every_option_and_the_defaults_it_gives() -> None:
    page = (DOCS / "aio.md").read_text()
    [paragraph] = [p for p in page.split("\n\n") if p.startswith("The failover options have")]
    named = set(re.findall(r"`([a-z_]+)`", paragraph))
    assert named == OPTION_NAMES
    given = re.findall(r"`([a-z_]+)` \(([\d.,]+)\)", paragraph)
    assert given, "the list gives some defaults"
    defaults = dict(OPTION_DEFAULTS)
    for name, value in given:
        assert _value(value) == defaults[name], name
