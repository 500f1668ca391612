"""Sphinx configuration of the docs site: ``make docs`` (docs/development.md, "Documentation").

The source folder is the repository's root, read through ``include_patterns``: the README,
the CHANGELOG, docs/ and the model-zoo pages of configs/ are documents where they lie, so the
links between them resolve on GitHub and on the site alike, and a link to another file of the
repository (a config, a tool) becomes a download of it. Pages are Markdown (MyST, as the
OpenMMLab toolboxes write theirs); the API reference (docs/api/) comes from the docstrings
through autodoc and napoleon (Google style). ``sphinx-build -W`` turns every warning into an
error: a missing page or ``#anchor``, a docstring that does not parse, a page in no toctree.
"""
import os
import os.path as osp
import sys

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
sys.path.insert(0, ROOT)  # the checkout's cvt_mm, also where it is not installed

project = 'cvt_mm'
author = 'The cvt_mm authors'
copyright = '2026, The cvt_mm authors'
release = next(line.split("'")[1] for line in open(osp.join(ROOT, 'cvt_mm', '__init__.py'))
               if line.startswith('__version__'))
version = release

root_doc = 'docs/index'
include_patterns = ['README.md', 'CHANGELOG.md', 'docs/*.md', 'docs/api/*.md',
                    'configs/*/README.md']
# Sphinx walks the source folder before matching: keep it out of the environments and outputs.
exclude_patterns = ['.venv*', '.git', '.gpu-site', 'docs/_build', 'work_dirs', 'outputs', 'data',
                    'checkpoints', 'wheelhouse', 'build', '**/__pycache__']

extensions = [
    'myst_parser',
    'sphinx.ext.autodoc',
    'sphinx.ext.napoleon',
    'sphinx.ext.viewcode',
]
source_suffix = {'.md': 'markdown'}

# GitHub's heading anchors (`docs/demo.md#reproducible`), checked like any reference.
myst_heading_anchors = 4
myst_enable_extensions = ['colon_fence']

autodoc_member_order = 'bysource'
autodoc_typehints = 'description'
autodoc_class_signature = 'separated'
autodoc_default_options = {'members': True, 'show-inheritance': True}
# Installed with the `docs` extra or not: the models need only torch; what a page documents
# from an optional library (transformers) is imported as the package imports it.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

html_theme = 'sphinx_rtd_theme'
html_title = f'cvt_mm {release}'
html_static_path = []
html_show_sourcelink = False


def _redirect_root(app, exception):
    """``_build/html/index.html`` opens the docs' index, which lives at ``docs/index.html``
    because the source folder is the repository's root."""
    if exception is None and app.builder.format == 'html':
        with open(os.path.join(app.outdir, 'index.html'), 'w') as f:
            f.write('<!DOCTYPE html><meta charset="utf-8"><title>cvt_mm</title>'
                    '<meta http-equiv="refresh" content="0; url=docs/index.html">'
                    '<a href="docs/index.html">cvt_mm documentation</a>\n')


def setup(app):
    app.connect('build-finished', _redirect_root)
