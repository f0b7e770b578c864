"""The local stack: ``sagegate run`` (``make run``), no AWS account, and what the tests drive.

:mod:`~sagegate.local.stack` is ``sagegate run``. It starts its children with
:mod:`~sagegate.local.processes` (which the integration tests and benchmarks use too) and
:mod:`~sagegate.local.aws` (moto's server behind its S3 front, the jobs' resources provisioned),
kept up by :mod:`~sagegate.local.supervision`. Inside the ``chalice local`` child:
:mod:`~sagegate.local.events` (the event pump) and :mod:`~sagegate.local.auth` (API keys).
:mod:`~sagegate.local.ports` names who holds a port; :mod:`~sagegate.local.browser` finds the
tests' Chromium.

Its arrows point down only: ``stack`` over ``aws`` over the children's modules over
``processes``; it reads stages and tables' schemas from :mod:`sagegate.deploy`, never the other
way (the contracts in ``pyproject.toml``).
"""
