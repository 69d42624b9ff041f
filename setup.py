"""Build of the optional compiled header walk (``shardstore/_tarwalk.c``); everything else is in
pyproject.toml.

The extension is ``optional``: where no C compiler or Python headers exist, the build warns and
the install goes on without it, and ``shardstore.tarscan`` uses its pure-Python walker.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("shardstore._tarwalk", ["shardstore/_tarwalk.c"], optional=True)])
