"""Write seqbench's prepared ml-1m-5core (ML-1M-3416) as Klenitskiy & Vasilev's data format:
'user item' lines, each user's items in order (the code's data/ml-1m.txt layout), ids as
seqbench's (items 1..3416, users + 1).

usage: python make_data.py SEQBENCH_DATA_DIR/ml-1m-5core OUT_TXT
"""
import os
import sys

import pyarrow.parquet as pq

src, out = sys.argv[1], sys.argv[2]
df = pq.read_table(os.path.join(src, "interactions.parquet")).to_pandas()
df = df.sort_values(["user", "position"], kind="stable")
assert df["item"].min() == 1 and df["item"].max() == df["item"].nunique() == 3416
with open(out + ".tmp", "w") as f:
    for u, i in zip(df["user"].to_numpy() + 1, df["item"].to_numpy(), strict=True):
        f.write(f"{u} {i}\n")
os.replace(out + ".tmp", out)
print(df["user"].nunique(), "users,", df["item"].nunique(), "items,", len(df), "interactions")
