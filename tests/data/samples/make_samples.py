"""Write the small committed samples of MNIST and USPS, in their original formats.

Run from anywhere: ``python tests/data/samples/make_samples.py [SOURCE [OUT]]``. It reads
the full datasets from SOURCE (default ``../shared/datasets`` beside the repository) and
writes into OUT (default: next to this script):

* ``mnist/``: the first 500 training and 200 test images and labels as gzipped IDX
  files with the official names and headers (counts rewritten);
* ``usps/``: the first 500 lines of ``zip.train`` and 200 of ``zip.test``, gzipped.

The output is byte-for-byte reproducible (gzip level 9, no file name, mtime 0).
"""

from __future__ import annotations

import gzip
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
TRAIN, TEST = 500, 200


def _write_gz(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as out:
        out.write(data)


def _idx_head(data: bytes, ndim: int, count: int) -> bytes:
    header = 4 + 4 * ndim
    magic = int.from_bytes(data[:4], "big")
    if magic != 0x0800 + ndim:
        raise SystemExit(f"unexpected IDX magic 0x{magic:08x}")
    dims = list(struct.unpack(f">{ndim}I", data[4:header]))
    per_item = 1
    for d in dims[1:]:
        per_item *= d
    dims[0] = count
    return data[:4] + struct.pack(f">{ndim}I", *dims) + data[header : header + count * per_item]


def main(source: Path, out: Path = HERE) -> None:
    """Write the samples from the full datasets in ``source`` into ``out``."""
    for split, count in (("train", TRAIN), ("t10k", TEST)):
        for kind, ndim in (("images", 3), ("labels", 1)):
            name = f"{split}-{kind}-idx{ndim}-ubyte.gz"
            data = gzip.decompress((source / "mnist" / name).read_bytes())
            _write_gz(out / "mnist" / name, _idx_head(data, ndim, count))
    for split, count in (("train", TRAIN), ("test", TEST)):
        lines = gzip.decompress((source / "usps" / f"zip.{split}.gz").read_bytes()).splitlines(keepends=True)
        _write_gz(out / "usps" / f"zip.{split}.gz", b"".join(lines[:count]))
    total = sum(p.stat().st_size for p in out.rglob("*.gz"))
    print(f"wrote samples to {out} ({total} bytes)")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO.parent / "shared" / "datasets",
         Path(sys.argv[2]) if len(sys.argv) > 2 else HERE)
