"""Build of the optional compiled header walk (``shardstore/_tarwalk.c``), mount hot paths
(``shardstore/_fusefast.c``) and frame cast (``shardstore/_unitfloat.c``); everything else is in
pyproject.toml.

The extensions are ``optional``: where no C compiler or Python headers exist, the build warns and
the install goes on without them, and ``shardstore.tarscan``, ``shardstore.mount.fs`` and
``shardstore.torch`` use their pure-Python (numpy) paths.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("shardstore._tarwalk", ["shardstore/_tarwalk.c"], optional=True),
        # the mount's compiled listing and open/read paths; without it shardstore.mount.fs runs them in Python
        Extension("shardstore._fusefast", ["shardstore/_fusefast.c"], optional=True),
        # decoded frames to float32 / 255 in one pass; without it shardstore.torch.chw_float uses numpy
        Extension("shardstore._unitfloat", ["shardstore/_unitfloat.c"], optional=True),
    ]
)
