"""Moving resource blobs between the IR text and a side file."""

from __future__ import annotations

from palimpsest.ir.attributes import ArrayAttr, DenseResourceAttr, DictionaryAttr, ResourceBlob
from palimpsest.ir.core import Operation


def unique_name(base: str, taken: set, first_suffix: int = 1) -> str:
    """`base`, or `base_N` for the first N from `first_suffix` that `taken` lacks; the
    name returned is added to `taken`. (Blob keys, SSA names, C identifiers.)"""
    name, suffix = base, first_suffix
    while name in taken:
        name = f"{base}_{suffix}"
        suffix += 1
    taken.add(name)
    return name


def blob_key_base(hint: str) -> str:
    """`hint` as a `dense_resource` key: letters, digits and `_` (anything else becomes
    `_`); "blob" for an empty hint."""
    return "".join(c if c.isalnum() or c == "_" else "_" for c in hint) or "blob"


def collect_blobs(root: Operation) -> dict[str, ResourceBlob]:
    """Every resource blob referenced under `root`, by key, in first-use order."""
    found: dict[str, ResourceBlob] = {}

    def visit(attr):
        if isinstance(attr, DenseResourceAttr):
            found.setdefault(attr.blob.key, attr.blob)
        elif isinstance(attr, ArrayAttr):
            for item in attr.value:
                visit(item)
        elif isinstance(attr, DictionaryAttr):
            for _, item in attr.entries:
                visit(item)

    for op in root.walk():
        for attr in op.properties.values():
            visit(attr)
        for attr in op.attributes.values():
            visit(attr)
    return found


def externalize_resources(root: Operation, path: str, alignment: int = 64) -> int:
    """Write every inline blob under `root` to the side file `path` (each at an offset
    aligned to `alignment`) and make the blobs refer to it. Returns the bytes written."""
    blobs = [b for b in collect_blobs(root).values() if b.data is not None]
    offset = 0
    with open(path, "wb") as handle:
        for blob in blobs:
            padding = -offset % max(alignment, blob.alignment, 1)
            handle.write(b"\0" * padding)
            offset += padding
            handle.write(blob.data)
            blob.path, blob.offset, blob.size = path, offset, len(blob.data)
            offset += len(blob.data)
            blob.data = None
    return offset
