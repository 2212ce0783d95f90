"""The README's model table lists exactly the models in the tree, and the quick start is the Makefile's."""

from __future__ import annotations

import re

from zoo_tree import ROOT, model_dirs, model_id

LINK = re.compile(r"\]\(((?:PyTorch|TensorFlow|MXNet)/[^)#\s]+?)/?\)")


def table_links() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    return [m for line in readme.splitlines() if line.startswith("|") for m in LINK.findall(line)]


def test_table_matches_tree():
    linked = set(table_links())
    present = {model_id(d) for d in model_dirs()}
    assert linked - present == set(), f"README links models that don't exist: {sorted(linked - present)}"
    assert present - linked == set(), f"models missing from README's table: {sorted(present - linked)}"


def test_table_has_one_row_per_model():
    links = table_links()
    assert len(links) == len(set(links)), "a model appears twice in the table"


def test_quick_start_commands_are_make_targets():
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    for target in ("demo", "test"):
        assert f"make {target}" in readme
        assert re.search(rf"^{target}:", makefile, re.M), f"Makefile has no '{target}' target"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci, ".ci/run must run the README's test command"


def test_design_documents_cited_by_code_exist():
    """Code and tests cite the project's own design documents, which live in the tree."""
    for doc in ("docs/ARCHITECTURE.md", "CONTRIBUTING.md"):
        assert (ROOT / doc).is_file(), f"{doc} missing"
    cited = set()
    for path in list(ROOT.glob("tests/*.py")) + list(ROOT.glob("common/zoo/**/*.py")):
        cited |= set(
            re.findall(r"\b((?:docs/)?(?:ARCHITECTURE|CONTRIBUTING|STYLE|DESIGN)\.md)\b", path.read_text())
        )
    missing = sorted(doc for doc in cited if not (ROOT / doc).is_file())
    assert not missing, f"cited but not in the repository: {missing}"
