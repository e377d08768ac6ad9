"""Write seqbench's prepared ml-1m-5core as the HSTU research code's sasrec_format.csv:
OUT/valid.csv (each user's test item dropped: trains on the training items, evaluates the
validation item) and OUT/test.csv (whole sequences, user ids + 1,000,000: evaluates the test
item with the validation item in the input). Ratings and timestamps 0 (the file has none).

usage: python make_data.py SEQBENCH_DATA_DIR OUT_DIR
"""
import os
import sys

import pyarrow.parquet as pq

src, out = sys.argv[1], sys.argv[2]
df = pq.read_table(os.path.join(src, "interactions.parquet")).to_pandas()
df = df.sort_values(["user", "position"])
shift = 1 if df["item"].min() == 0 else 0
assert df["item"].min() + shift == 1
os.makedirs(out, exist_ok=True)


def write(path, seqs, uid_shift):
    with open(path + ".tmp", "w") as f:
        f.write("index,user_id,sequence_item_ids,sequence_ratings,sequence_timestamps\n")
        for i, (u, items) in enumerate(seqs):
            s = ",".join(map(str, items))
            z = ",".join("0" * len(items))
            f.write(f'{i},{u + uid_shift},"{s}","{z}","{z}"\n')
    os.replace(path + ".tmp", path)


valid, test = [], []
for u, g in df.groupby("user", sort=True):
    items = (g["item"] + shift).tolist()
    splits = g["split"].tolist()
    assert splits[-1] == 2 and splits[-2] == 1 and all(s == 0 for s in splits[:-2]), u
    valid.append((u + 1, items[:-1]))
    test.append((u + 1, items))
write(os.path.join(out, "valid.csv"), valid, 0)
write(os.path.join(out, "test.csv"), test, 1_000_000)
print(len(valid), "users,", df["item"].nunique(), "items, max id", df["item"].max() + shift)
