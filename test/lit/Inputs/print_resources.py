"""Print every dense_resource<...> of a .pal file with its bytes, read through the blob
(inline hex, or the byte range of a side file): `key: HEX (N bytes) path=...`."""

import sys

from palimpsest.dialects import load_all
from palimpsest.ir.attributes import DenseResourceAttr
from palimpsest.ir.parser import parse

load_all()
path = sys.argv[1]
module = parse(open(path, encoding="utf-8").read(), path)
seen = set()
for op in module.walk():
    for attr in list(op.properties.values()) + list(op.attributes.values()):
        if isinstance(attr, DenseResourceAttr) and attr.blob.key not in seen:
            seen.add(attr.blob.key)
            blob = attr.blob
            where = f"external offset={blob.offset}" if blob.is_external else "inline"
            print(f"{blob.key}: {blob.read().hex()} ({blob.nbytes} bytes, {where}, "
                  f"alignment={blob.alignment})")
