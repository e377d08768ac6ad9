"""The frames every format reader returns, and the fixed-column parser the tabular formats
share (below both `readers` and `event_readers`, so neither imports the other's internals)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

from seqbench.data.rawfile import Stream, as_id, fail, lines
from seqbench.errors import DataError


def read_table(
    path: Path,
    columns: dict[str, pa.DataType],
    delimiter: str = ",",
    encoding: str = "utf8",
    header: str | None = None,
    double_colon: bool = False,
) -> pd.DataFrame:
    """Parse a delimited file with fixed columns; on error, find and name the first bad line."""
    if header is not None:
        first = next(lines(path, encoding), (1, ""))[1]
        if first.replace('"', "").strip().lower() != header.lower():
            raise fail(path, f"unexpected header {first[:80]!r}", f"expected {header!r}", 1)
    stream = Stream(path, double_colon)
    try:
        table = pacsv.read_csv(
            stream,
            read_options=pacsv.ReadOptions(
                column_names=list(columns), skip_rows=int(header is not None), encoding=encoding
            ),
            parse_options=pacsv.ParseOptions(delimiter="\t" if double_colon else delimiter),
            convert_options=pacsv.ConvertOptions(column_types=columns),
        )
    except pa.ArrowInvalid as e:
        raise bad_line(path, columns, delimiter, encoding, header is not None, str(e)) from None
    finally:
        stream.close()
    if table.num_rows == 0:
        raise fail(path, "file has no data rows", "download it again")
    return table.to_pandas(split_blocks=True, self_destruct=True)


def bad_line(
    path: Path,
    columns: dict[str, pa.DataType],
    delimiter: str,
    encoding: str,
    skip_header: bool,
    message: str,
) -> DataError:
    """Scan the file line by line (only after a parse error) to name the first bad line."""
    if "Empty CSV file" in message:
        return fail(path, "file is empty", "download it again")
    names = list(columns)
    for lineno, text in lines(path, encoding):
        if skip_header and lineno == 1:
            continue
        fields = text.split(delimiter)
        if len(fields) != len(names):
            return fail(
                path,
                f"expected {len(names)} fields ({', '.join(names)}), found {len(fields)}",
                "is this the right file for the format?",
                lineno,
            )
        for name, value in zip(names, fields, strict=True):
            kind = columns[name]
            if pa.types.is_integer(kind):
                try:
                    as_id(path, value, name, lineno)
                except DataError as e:
                    return e
            if pa.types.is_floating(kind):
                try:
                    float(value)
                except ValueError:
                    return fail(path, f"{name} {value!r} is not a number", "fix or drop it", lineno)
    return fail(path, f"cannot parse ({message})", "check the file format")


def interaction_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Normalise reader output dtypes: int64 timestamps, float32 ratings."""
    out = {"user": df["user"], "item": df["item"]}
    if "timestamp" in df:
        out["timestamp"] = df["timestamp"].astype(np.int64)
    if "rating" in df:
        out["rating"] = df["rating"].astype(np.float32)
    return pd.DataFrame(out)


RATING_COLUMNS = {
    "user": pa.int64(),
    "item": pa.int64(),
    "rating": pa.float32(),
    "timestamp": pa.int64(),
}


def side_frame(rows: list[tuple[str, str, str]]) -> pd.DataFrame:
    """Side-information rows as the long (id, field, token) frame."""
    return pd.DataFrame(rows, columns=["id", "field", "token"], dtype=object)
