"""docs/architecture.md lists every module: a module added without its line in the map fails here, so
the map stays the one place that says where an idea lives."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "shardstore"


def test_every_module_and_package_is_in_the_module_map() -> None:
    doc = (ROOT / "docs/architecture.md").read_text()
    wanted = [p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    wanted += [p.name for p in (PACKAGE / "episodes").glob("*.py") if p.name != "__init__.py"]
    wanted += [p.name for p in (PACKAGE / "convert").glob("*.py") if p.name != "__init__.py"]
    wanted += [f"{p.name}/" for p in PACKAGE.iterdir() if (p / "__init__.py").exists()]
    wanted += [f"{p.name}/" for p in (PACKAGE / "convert").iterdir() if (p / "__init__.py").exists()]
    missing = sorted(name for name in wanted if name not in doc)
    assert not missing, f"docs/architecture.md does not name {missing}"
