"""The local stack: ``sagegate run`` (``make run``), no AWS account, and what the tests drive.

:mod:`~sagegate.local.stack` is ``sagegate run`` (the checks before anything starts, the ready
lines, the supervision until Ctrl-C). It starts its children with
:mod:`~sagegate.local.processes` (the emulator through its own launcher, ``chalice local``
through :mod:`~sagegate.local.chalice_local`, readiness, stop by PID), which the integration
tests and the benchmarks use too, and with :mod:`~sagegate.local.aws` (moto's server,
:mod:`~sagegate.local.moto_server` behind its S3 front, :mod:`~sagegate.local.s3_forms`, and
the jobs' bucket, topics, queues and tables provisioned in it), keeping them up with
:mod:`~sagegate.local.supervision`. Inside the ``chalice local`` child:
:mod:`~sagegate.local.events` (the event pump to the job functions) and
:mod:`~sagegate.local.auth` (API keys, as API Gateway checks them).
:mod:`~sagegate.local.ports` names who holds a port; :mod:`~sagegate.local.browser` finds the
Chromium the web page's tests drive (``sagegate browser``).

Its arrows point down only: ``stack`` over ``aws`` over the children's modules over
``processes``; the stack reads stages and the tables' schemas from :mod:`sagegate.deploy`,
never the other way (the contracts in ``pyproject.toml``).
"""
