"""Sphinx configuration: the guide (Markdown pages, MyST-Parser) and the API reference (autodoc).

Built in CI with warnings as errors and nitpicky cross-references (``.ci/run``):
``sphinx-build -W --keep-going -n -b html docs <out>``. No extension reaches the network.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # the checkout's code, whether or not it is installed

import seqlen_balancing  # noqa: E402
from seqlen_balancing.agreement import VECTOR_SIZE  # noqa: E402

project = "seqlen-balancing"
author = "seqlen-balancing developers"
copyright = "seqlen-balancing developers; Apache-2.0"
release = seqlen_balancing.__version__
version = release

extensions = [
    "myst_parser",  # the pages are Markdown
    "sphinx.ext.autodoc",  # the API reference, from the docstrings
    "sphinx.ext.napoleon",  # the docstrings' Args / Returns / Raises / Example sections
]

source_suffix = {".md": "markdown"}
root_doc = "index"
# docs/mutation/ (the mutation-testing records) is part of the site, under development.md
exclude_patterns = ["_build"]

myst_heading_anchors = 3  # [text](page.md#a-heading) links are checked like references
myst_enable_extensions = ["colon_fence", "substitution"]
# Facts the pages take from the code rather than restate: {{ vector_size }} in a page is the
# number of int64 values in the agreement's one all_reduce.
myst_substitutions = {"vector_size": str(VECTOR_SIZE)}

# autodoc imports the package's modules but not torch or tensordict: importing them (and
# torch._dynamo, which tensordict loads) took about 4 of the build's 8.5 CPU-seconds, and the
# reference needs only their names in signatures. The tests import the real ones. (api.md
# declares the package with py:module, not automodule, whose member scan would load the
# TensorDict functions, hence torch, outside the mock.)
autodoc_mock_imports = ["torch", "tensordict"]
# autodoc: signatures as written, type hints in the signature line, members in source order
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
# an error record's field type that is an annotated int: shown by its name
autodoc_type_aliases = {"NonPositive": "seqlen_balancing.errors.NonPositive"}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

nitpicky = True
# Types from packages the reference does not document (no intersphinx: the build stays
# offline); each entry is a name that appears in a signature or a docstring's type.
nitpick_ignore = [
    ("py:class", "torch.Tensor"),
    ("py:class", "Tensor"),
    ("py:class", "TensorDict"),
    ("py:class", "tensordict.TensorDict"),
    ("py:class", "tensordict._td.TensorDict"),
    ("py:class", "numpy.ndarray"),
    ("py:class", "types.ModuleType"),  # seqlen_balancing.native.twin's compiled module
    # seqlen_balancing.native.Twinned's type parameters (the Python code's own signature)
    ("py:class", "_P"),
    ("py:class", "seqlen_balancing.native._R"),
    ("py:class", "ProcessGroup"),
    ("py:class", "torch.distributed.ProcessGroup"),
    # the parser's namespace (PlanOptions.from_args) and the planner's per-rank record
    ("py:class", "argparse.Namespace"),
    # the cut's internal record of a padded micro-batch's columns (MicroBatchIndices takes it)
    ("py:class", "seqlen_balancing.batch.trim.Trim"),
    ("py:class", "seqlen_balancing.planning.analysis.RankAnalysis"),
]
# The standard library's and torch's types in signatures (no intersphinx: offline build)
nitpick_ignore_regex = [
    ("py:class", r"collections\.abc\..*"),
    ("py:class", r"torch\..*"),
    ("py:class", r"tensordict\..*"),
    ("py:class", r"numpy\..*"),
    # prepare_dynamic_batch's TypeVar (the DataProto-like type in, the same type out)
    ("py:class", r"(seqlen_balancing\.batch(\.\w+)?\.)?T"),
]

html_theme = "alabaster"  # ships with Sphinx: nothing more to install
html_title = f"seqlen-balancing {release}"
html_static_path: list[str] = []

highlight_language = "none"  # output blocks without a language are shown as they are
