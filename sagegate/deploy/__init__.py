"""Deployment: the layer, the packages, the templates, the checks and the deploys. Never packaged
into the function.

Offline (``sagegate check`` runs them in ``make test``): :mod:`~sagegate.deploy.layer`,
:mod:`~sagegate.deploy.package` (SAM or Terraform), :mod:`~sagegate.deploy.templates`,
:mod:`~sagegate.deploy.policy` (least-privilege IAM), :mod:`~sagegate.deploy.check` (cfn-lint,
checkov, the SAM translator), :mod:`~sagegate.deploy.lock`. Needing AWS: ``sagegate layer
--bucket``, :mod:`~sagegate.deploy.sam_deploy`, :mod:`~sagegate.deploy.chalice_deploy`,
:mod:`~sagegate.deploy.snapstart`, through :mod:`~sagegate.deploy.aws`. Shared:
:mod:`~sagegate.deploy.stages` (a stage as Chalice resolves it;
:data:`~sagegate.deploy.stages.DEPLOY_STAGES`), :mod:`~sagegate.deploy.stage` (the value every
module reads; it imports no other module here), :mod:`~sagegate.deploy.runtime`,
:mod:`~sagegate.deploy.sandbox` (the packaged handler run as Lambda runs it).
"""
