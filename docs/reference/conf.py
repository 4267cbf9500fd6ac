"""Sphinx settings of the API reference (docs/reference): the docstrings of ``import mutransfer as mt``.

Build: ``python -m sphinx -W --keep-going -b html docs/reference <out>`` (tests/test_api_reference.py does, into a
temporary folder). Needs ``pip install -e ".[docs]"``; no theme but the default, nothing fetched from the network.
"""

import sys
from pathlib import Path

# the checkout's package, when this is the checkout's docs/reference (an installed mutransfer otherwise)
_ROOT = Path(__file__).resolve().parents[2]
if (_ROOT / "mutransfer" / "__init__.py").is_file():
    sys.path.insert(0, str(_ROOT))

from mutransfer import __version__  # noqa: E402 -- after the path above

project = "mutransfer"
copyright = "mutransfer authors"
release = version = __version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_member_order = "bysource"
autodoc_typehints = "signature"

nitpicky = False
html_theme = "alabaster"
exclude_patterns = ["_build"]
