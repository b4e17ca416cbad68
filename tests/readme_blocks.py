"""The README's code blocks, by the heading they stand under, so tests can run them."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"

_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def readme_block(heading: str, language: str) -> str:
    """The first ``language`` block under the ``## heading`` section of README.md."""
    text = README.read_text()
    sections = re.split(r"^## ", text, flags=re.M)
    for section in sections:
        title, _, body = section.partition("\n")
        if title.strip() == heading:
            for match in _BLOCK.finditer(body):
                if match.group(1) == language:
                    return match.group(2)
    raise LookupError(f"README.md has no {language} block under '## {heading}'")
