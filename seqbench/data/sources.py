"""Where a dataset's raw files are: a --raw-dir folder or the download cache (verified), as
named, gzipped or inside their archive, else downloaded; the first source whose required files
are all there wins, and the files found are recorded (role, path, sha256) on the card.
"""

from __future__ import annotations

import errno
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
    """Fetch the missing files of a source (archives once), verifying known checksums; a
    failed download leaves no empty cache folder it created behind."""
    created = []
    for folder in [cache, *cache.parents]:
        if folder.exists():
            break
        created.append(folder)
    try:
        for url in dict.fromkeys(f.url for f in missing if f.url):
            direct = [f for f in missing if f.url == url and not f.archive]
            sha = direct[0].sha256 if direct else None
            fetch(url, cache / Path(url).name, sha, console=console)
    except BaseException:
        for folder in created:  # deepest first; one holding a partial download stays
            try:
                folder.rmdir()
            except OSError:
                break
        raise


def check_raw_dirs(raw_dirs: list[Path]) -> None:
    """Each --raw-dir is a folder, or a one-line error saying what it is instead (missing, a
    file, a symbolic link loop) before anything is looked up or downloaded."""
    for folder in raw_dirs:
        try:
            is_dir = folder.is_dir() if folder.exists() else None
            folder.stat()
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise DataError(
                    f"--raw-dir {folder}: a loop of symbolic links: point it at the folder itself"
                ) from None
            is_dir = None
        if is_dir is None:
            raise DataError(
                f"--raw-dir {folder}: no such folder: give the folder that holds the raw files"
            )
        if not is_dir:
            raise DataError(
                f"--raw-dir {folder} is a file, not a folder: give the folder that holds it "
                f"(--raw-dir {folder.parent})"
            )


def resolve(
    spec: DatasetSpec,
    raw_dirs: list[Path],
    cache: Path,
    allow_download: bool,
    console: Console | None = None,
) -> tuple[SourceSpec, Files]:
    """The first source whose required files are all found (downloading one if none is)."""
    check_raw_dirs(raw_dirs)
    wanted = []
    for source in spec.sources:
        found = {f.role: (f, find_file(f, raw_dirs, cache)) for f in source.files}
        missing = [f for f, p in found.values() if p is None and not f.optional]
        if not missing:
            return source, {role: (f, p) for role, (f, p) in found.items() if p is not None}
        wanted.append((source, missing))
    for _, missing in wanted:  # a folder where a raw file belongs is not a missing file
        for folder, f in ((d, f) for d in raw_dirs for f in missing):
            if (folder / f.file).is_dir():
                raise DataError(
                    f"{folder / f.file} is a folder, not the raw file {f.file}: put the file "
                    "itself there"
                )
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
