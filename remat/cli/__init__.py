"""The ``remat`` command line (see ``remat --help``)."""
