"""sagegate's developer and user tools, behind one console script, ``sagegate``.

Nothing here is deployed: Chalice packages only ``app.py`` and ``chalicelib/``. The package
holds what a developer or an operator runs around the function, one room per job:

* :mod:`sagegate.local`: the local stack (``sagegate run``: the SageMaker emulator, moto's
  server and ``chalice local``), and the Chromium the web page's tests drive;
* :mod:`sagegate.client`: the Python client and ``sagegate predict`` / ``resize``;
* :mod:`sagegate.captures`: the data capture reader (``sagegate capture``);
* :mod:`sagegate.monitor`: the data quality monitor's command line (``sagegate monitor``);
* :mod:`sagegate.deploy`: the Lambda layer, ``chalice package`` and the templates, the
  offline checks, IAM policies, and the AWS deploys themselves (and the stage settings the
  rooms above read).

The benchmarks (``sagegate bench``, ``bench-coldstart``, ``bench-worstcase``) live in
``bench/``. ``sagegate --help`` lists every command; ``sagegate <command> --help`` explains
one (:mod:`sagegate.cli`, the one module no room imports: it loads a command's module by
name only when that command runs). The rooms import downwards only and never in a circle:
the contracts in ``pyproject.toml``, checked by ``lint-imports``.
"""
