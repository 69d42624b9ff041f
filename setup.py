"""Build of the optional compiled header walk (``shardstore/_tarwalk.c``) and mount hot paths
(``shardstore/_fusefast.c``); everything else is in pyproject.toml.

The extensions are ``optional``: where no C compiler or Python headers exist, the build warns and
the install goes on without them, and ``shardstore.tarscan`` and ``shardstore.mount.fs`` use their
pure-Python paths.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("shardstore._tarwalk", ["shardstore/_tarwalk.c"], optional=True),
        # the mount's compiled listing and open/read paths; without it shardstore.mount.fs runs them in Python
        Extension("shardstore._fusefast", ["shardstore/_fusefast.c"], optional=True),
    ]
)
