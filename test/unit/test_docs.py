"""docs/design.md is in the repository, linked from the README, and kept current: the
files, pipelines and passes it names exist."""

import re
from pathlib import Path

from palimpsest.passes.pass_manager import PIPELINES

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"


def test_readme_links_the_design_in_the_repository():
    readme = (ROOT / "README.md").read_text()
    assert "](docs/design.md)" in readme
    for path in ROOT.rglob("*"):
        if ".git" in path.parts or "egg-info" in str(path) or not path.is_file() or \
                path.suffix not in (".md", ".py", ".pal", ".toml", ".cfg"):
            continue
        assert "shared/" + "DESIGN.md" not in path.read_text(errors="replace"), path


def test_design_names_files_that_exist():
    text = DESIGN.read_text()
    named = set(re.findall(r"`((?:ir|dialects|passes|backends|tools|test|benchmarks|docs|"
                           r"examples)/[\w/.]+?)`", text))
    named |= {f"dialects/graph/{n}" for n in re.findall(r"`(\w+\.(?:py|md))`", text)
              if (ROOT / "dialects" / "graph" / n).exists()}
    named |= {f"test/unit/{n}" for n in re.findall(r"`(test_\w+\.py)`", text)}
    assert len(named) >= 10
    missing = sorted(p for p in named if not (ROOT / p.split("::")[0]).exists()
                     and not list(ROOT.glob(p)))
    assert not missing, f"docs/design.md names files that do not exist: {missing}"


def test_design_names_the_pipelines_and_passes_that_exist():
    from palimpsest.passes.pass_manager import registered_passes

    text = DESIGN.read_text()
    for name in PIPELINES:
        assert f"`{name}`" in text, f"docs/design.md does not name the pipeline {name}"
    passes = set(registered_passes())
    for name in re.findall(r"`([a-z]+(?:-[a-z]+)+)`", text):
        if name.startswith("palimpsest-") or name in PIPELINES or name in (
                "inputs-as-activations", "fuse-elementwise"):
            continue    # tools, pipelines and pass options
        assert name in passes, f"docs/design.md names a pass that does not exist: {name}"
