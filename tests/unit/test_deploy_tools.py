"""The deploy helpers in scripts/: sizes and limits, reproducible zips, config edits, templates."""
from __future__ import annotations

import dataclasses
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from scripts import artifact_sizes, gateway_responses, sam_template, stage_config, zipdir
from scripts.stage_config import CONFIG_PATH, load_stage

MB = 1024 * 1024


def make_zip(path: Path, files: dict[str, int]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as out:
        for name, size in files.items():
            out.writestr(name, b"\0" * size)
    return path


def test_sizes_report_zipped_and_unzipped_totals(tmp_path: Path) -> None:
    function = artifact_sizes.ZipSize.of(make_zip(tmp_path / "f.zip", {"app.py": 1000}))
    layer = artifact_sizes.ZipSize.of(make_zip(tmp_path / "l.zip", {"python/a": 2 * MB}))
    lines, broken = artifact_sizes.report(function, [layer])
    assert broken == []
    assert function.unzipped == 1000 and layer.unzipped == 2 * MB
    assert "function + layers, unzipped" in lines[-1] and "250 MB" in lines[-1]


def test_sizes_flag_a_fat_function_and_a_layer_over_250_mb(tmp_path: Path) -> None:
    function = artifact_sizes.ZipSize(tmp_path / "f.zip", 6 * MB, 7 * MB, 1)
    layer = artifact_sizes.ZipSize(tmp_path / "l.zip", 90 * MB, 245 * MB, 1)
    _, broken = artifact_sizes.report(function, [layer])
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
    stage_config.record_layer("prod", arn, config_copy)
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
        stage_config.record_layer("prod", arn, config_copy)


def test_merge_template_adds_the_usage_plan_only_for_api_keys() -> None:
    prod = load_stage("prod")
    assert "ApiUsagePlan" in sam_template.merge_template(prod)["Resources"]
    iam = dataclasses.replace(prod, env={**prod.env, "SAGEGATE_AUTH": "iam"})
    template = sam_template.merge_template(iam)
    assert not {"ApiUsagePlan", "ApiKey", "ApiUsagePlanKey"} & set(template["Resources"])
    assert "UsagePlanRateLimit" not in template["Parameters"]


def test_the_usage_plan_stack_points_at_a_chalice_deployed_api() -> None:
    template = sam_template.usage_plan_template(load_stage("prod"))
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
    config = stage_config.terraform_config("prod", config_copy)
    original = json.loads(config_copy.read_text())
    assert "log_retention_in_days" in original["stages"]["prod"]
    assert "log_retention_in_days" not in config["stages"]["prod"]
    config["stages"]["prod"]["log_retention_in_days"] = \
        original["stages"]["prod"]["log_retention_in_days"]
    assert config == original
