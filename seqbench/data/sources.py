"""Where a dataset's raw files are: a --raw-dir folder or the download cache (verified), as
named, gzipped or inside their archive, else downloaded; the first source whose required files
are all there wins, and the files found are recorded (role, path, sha256) on the card.
"""

from __future__ import annotations

import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from seqbench.data.download import fetch, sha256_file
from seqbench.data.registry import DatasetSpec, FileSpec, SourceSpec
from seqbench.errors import DataError
from seqbench.io import atomic_path

#: the raw files of a source: role -> (its spec, where it was found)
Files = dict[str, tuple[FileSpec, Path]]


@dataclass
class Found:
    """The source a dataset is prepared from: its name, the files found (recorded and by
    role) and notes for the user; the generator's for a synthetic dataset."""

    name: str = "generator"
    sources: list[dict[str, Any]] = field(default_factory=list)
    files: Files = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def find_sources(
    spec: DatasetSpec, raw_dirs: list[Path], cache: Path, allow_download: bool, console: Console
) -> Found:
    """The raw files of `spec` (`resolve`), recorded; nothing for a generated dataset."""
    if spec.generator is not None:
        return Found()
    source, files = resolve(spec, raw_dirs, cache, allow_download, console)
    sources, notes = recorded(source, files)
    return Found(source.name, sources, files, notes)


def _lookup(folder: Path, name: str) -> Path | None:
    """`folder/name`, matching the name case-insensitively (registry names vs. local copies)."""
    exact = folder / name
    if exact.is_file():
        return exact
    if folder.is_dir():
        for p in folder.iterdir():
            if p.name.lower() == name.lower() and p.is_file():
                return p
    return None


def _extract(archive: Path, member: str, cache: Path) -> Path:
    """Extract one archive member into the cache (atomically) and return its path."""
    dest = cache / archive.stem / Path(member).name
    if dest.is_file():
        return dest
    try:
        with (
            zipfile.ZipFile(archive) as zf,
            zf.open(member) as src,
            atomic_path(dest) as tmp,
            open(tmp, "wb") as out,
        ):
            shutil.copyfileobj(src, out, 1 << 20)
    except (zipfile.BadZipFile, EOFError, OSError) as e:
        raise DataError(
            f"{archive}: cannot extract {member} ({e}): re-download the archive"
        ) from None
    except KeyError:
        raise DataError(f"{archive}: has no member {member}: is it the right archive?") from None
    return dest


def find_file(spec: FileSpec, raw_dirs: list[Path], cache: Path) -> Path | None:
    """A raw file from the raw dirs or the cache: as named, gzipped, or inside its archive."""
    for folder in [*raw_dirs, cache]:
        for name in (spec.file, spec.file + ".gz"):
            if found := _lookup(folder, name):
                return _verified(found, spec) if folder == cache else found
        if spec.archive and spec.member and (archive := _lookup(folder, spec.archive)):
            return _verified(_extract(archive, spec.member, cache), spec)
    return None


def _verified(cached: Path, spec: FileSpec) -> Path:
    """A file of the download cache, refused in one line when it no longer has the registry's
    sha256 (a cut download or a damaged disk): the cache is never trusted blindly."""
    named = cached.name.lower() == Path(spec.file).name.lower()
    if spec.sha256 and named and sha256_file(cached) != spec.sha256:
        raise DataError(
            f"{cached}: the cached file differs from the registry's sha256 (damaged or cut "
            "short): delete it to download it again, or put a verified copy in --raw-dir"
        )
    return cached


def _download(missing: list[FileSpec], cache: Path, console: Console | None) -> None:
    """Fetch the missing files of a source (archives once), verifying known checksums."""
    for url in dict.fromkeys(f.url for f in missing if f.url):
        direct = [f for f in missing if f.url == url and not f.archive]
        fetch(url, cache / Path(url).name, direct[0].sha256 if direct else None, console=console)


def resolve(
    spec: DatasetSpec,
    raw_dirs: list[Path],
    cache: Path,
    allow_download: bool,
    console: Console | None = None,
) -> tuple[SourceSpec, Files]:
    """The first source whose required files are all found (downloading one if none is)."""
    wanted = []
    for source in spec.sources:
        found = {f.role: (f, find_file(f, raw_dirs, cache)) for f in source.files}
        missing = [f for f, p in found.values() if p is None and not f.optional]
        if not missing:
            return source, {role: (f, p) for role, (f, p) in found.items() if p is not None}
        wanted.append((source, missing))
    dirs = ", ".join(str(d) for d in raw_dirs) or "none given"
    need = "; or ".join(
        f"{' + '.join(f.file for f in missing)} ({source.name})" for source, missing in wanted
    )
    if allow_download:
        for _, missing in wanted:
            if all(f.url for f in missing):
                try:
                    _download(missing, cache, console)
                except DataError as e:  # offline: name every source's files, not one URL
                    raise DataError(f"{e}; any one source will do: {need}") from None
                return resolve(spec, raw_dirs, cache, False, console)
    raise DataError(
        f"{spec.name}: raw files not found in --raw-dir ({dirs}) or the cache ({cache}): "
        f"need {need}; put them in a --raw-dir"
    )


def recorded(source: SourceSpec, files: Files) -> tuple[list[dict[str, Any]], list[str]]:
    """Each raw file found (role, name, path, sha256) and notes on optional files missing or
    files that differ from the registry's checksum."""
    notes = [
        f"optional {f.file} not found: no {f.role}" for f in source.files if f.role not in files
    ]
    sources = []
    for role, (fspec, path) in files.items():
        digest = sha256_file(path)
        if fspec.sha256 and digest != fspec.sha256 and path.suffix != ".gz":
            notes.append(f"{path} differs from the registry checksum {fspec.sha256[:12]}…")
        sources.append({"role": role, "file": path.name, "path": str(path), "sha256": digest})
    return sources, notes
