"""MkDocs hook: add the generated reference pages (`docs/gen.py`) to the site."""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.structure.files import File, Files

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gen


def on_files(files: Files, config) -> Files:
    for path, page in gen.PAGES.items():
        files.append(File.generated(config, path, content=page()))
    return files
