# -*- Python -*-
"""lit configuration of Palimpsest's FileCheck suite: `.pal` files with RUN/CHECK lines.

Run it with `python -m pytest test/unit/test_lit.py` (pytest runs it as one test) or
directly with `lit -v test/lit`.

Substitutions:
  %python     the Python interpreter running lit (the one palimpsest is installed in)
  %roundtrip  `%python roundtrip.py`: parse, print, parse, print; checks that printing is
              idempotent and that the pretty and generic forms parse back to the same IR,
              then writes the printed text to stdout for FileCheck. Takes palimpsest-opt's
              --allow-unregistered-dialect, --split-input-file and --print-op-generic.
"""

import os
import sys

import lit.formats

config.name = "palimpsest"
# ShTest(), not ShTest(True): lit's internal shell, the same on every platform.
config.test_format = lit.formats.ShTest()
config.suffixes = [".pal"]
config.test_source_root = os.path.dirname(__file__)
# Output: lit's scratch files (%t); Inputs: files the tests read, not tests themselves.
config.excludes = ["Output", "Inputs", "lit.cfg.py", "roundtrip.py"]

# palimpsest-opt and filecheck are console scripts next to the interpreter running lit.
bin_dir = os.path.dirname(sys.executable)
config.environment["PATH"] = os.pathsep.join(
    [bin_dir, config.environment.get("PATH", os.environ.get("PATH", ""))])
for name in ("XDG_CACHE_HOME", "PALIMPSEST_DEBUG"):
    if name in os.environ:
        config.environment[name] = os.environ[name]

python = f'"{sys.executable}"'
roundtrip = os.path.join(config.test_source_root, "roundtrip.py")
config.substitutions.append(("%roundtrip", f'{python} "{roundtrip}"'))
config.substitutions.append(("%python", python))
