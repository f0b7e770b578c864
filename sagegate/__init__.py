"""sagegate's developer and user tools, behind one console script, ``sagegate``.

Nothing here is deployed: Chalice packages only ``app.py`` and ``chalicelib/``. The package
holds what a developer or an operator runs around the function:

* the local stack (``sagegate run``: the SageMaker emulator and ``chalice local``),
* the data capture reader (``sagegate capture``),
* the benchmarks (``sagegate bench``, ``bench-coldstart``, ``bench-worstcase``),
* deployment (:mod:`sagegate.deploy`): the Lambda layer, ``chalice package`` and the
  templates, the offline checks, IAM policies, and the AWS deploys themselves.

``sagegate --help`` lists every command; ``sagegate <command> --help`` explains one
(:mod:`sagegate.cli`).
"""
