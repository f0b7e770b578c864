"""Deployment: the layer, the packages, the templates, the checks and the deploys.

Offline (``sagegate check`` runs them in ``make test``): :mod:`~sagegate.deploy.layer` (the
layer zip), :mod:`~sagegate.deploy.package` (``chalice package``, SAM or Terraform),
:mod:`~sagegate.deploy.templates` (the merge template, SnapStart, the usage-plan stack),
:mod:`~sagegate.deploy.policy` (least-privilege IAM), :mod:`~sagegate.deploy.check`
(cfn-lint, checkov, AWS's SAM translator), :mod:`~sagegate.deploy.lock` (the locks).

Needing AWS: ``sagegate layer --bucket``, :mod:`~sagegate.deploy.sam_deploy`
(``sagegate deploy``), :mod:`~sagegate.deploy.chalice_deploy`,
:mod:`~sagegate.deploy.snapstart`, through :mod:`~sagegate.deploy.aws`.

Shared: :mod:`~sagegate.deploy.stages` (a stage's settings as Chalice resolves them, and
:data:`~sagegate.deploy.stages.DEPLOY_STAGES`), :mod:`~sagegate.deploy.stage` (the
:class:`~sagegate.deploy.stage.Stage` value every module reads; it imports no other module
here), :mod:`~sagegate.deploy.runtime` (the Lambda runtime and its wheels),
:mod:`~sagegate.deploy.sandbox` (the packaged handler run as Lambda runs it, for the deploy
tests and the cold-start benchmark). Never packaged into the function.
"""
