"""sagegate's developer and user tools, behind one console script, ``sagegate``.

Nothing here is deployed: Chalice packages only ``app.py`` and ``chalicelib/``. One room per job:

* :mod:`sagegate.local`: the local stack (``sagegate run``) and the web page tests' Chromium;
* :mod:`sagegate.client`: the Python client and ``sagegate predict`` / ``resize``;
* :mod:`sagegate.captures`: the data capture reader (``sagegate capture``);
* :mod:`sagegate.monitor`: the data quality monitor's command line (``sagegate monitor``);
* :mod:`sagegate.deploy`: the layer, packaging, templates, offline checks, IAM policies and the
  AWS deploys (and the stage settings the rooms above read).

The benchmarks live in ``bench/``. :mod:`sagegate.cli` is the one module no room imports: it
loads a command's module by name only when that command runs. The rooms import downwards only and
never in a circle: the contracts in ``pyproject.toml``, checked by ``lint-imports``.
"""
