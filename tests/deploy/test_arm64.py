"""arm64 (Graviton): the stages' architecture, the arm64 package, and its code run by an arm64
CPython under qemu (``sagegate arm64-check``)."""
from __future__ import annotations

import json
import os
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from sagegate.deploy import arm64, runtime, sizes
from sagegate.deploy.package import package_dir
from sagegate.deploy.shell import DeployError
from sagegate.deploy.stages import DEPLOY_STAGES, load_stage
from tests.deploy.conftest import ROOT, Package

pytestmark = pytest.mark.deploy

ELF_MACHINES = {"arm64": 183, "x86_64": 62}  # e_machine: EM_AARCH64, EM_X86_64
FUNCTION_TYPE = "AWS::Serverless::Function"


def elf_machines(layer_zip: Path) -> set[int]:
    """The e_machine of every shared library in a layer zip."""
    found = set()
    with zipfile.ZipFile(layer_zip) as zipped:
        for name in zipped.namelist():
            if ".so" in Path(name).name:
                with zipped.open(name) as library:
                    header = library.read(20)
                assert header[:4] == b"\x7fELF", name
                found.add(struct.unpack_from("<H", header, 18)[0])
    return found


def architectures(template: dict[str, object]) -> dict[str, list[str]]:
    resources = template["Resources"]
    assert isinstance(resources, dict)
    return {name: resource["Properties"].get("Architectures")
            for name, resource in resources.items() if resource["Type"] == FUNCTION_TYPE}


@pytest.fixture(scope="module")
def arm64_report() -> arm64.Report:
    """``sagegate arm64-check --stage prod`` (about a minute and a half: the import of app under
    emulation is most of it)."""
    try:
        arm64.tools()
    except DeployError as error:  # its message says how to install them
        if os.environ.get("CI"):
            raise  # make test installs them (make arm64-tools): CI must not skip the proof
        pytest.skip(str(error))
    return arm64.check(load_stage("prod"))


@pytest.mark.parametrize("stage", DEPLOY_STAGES)
def test_deployed_stages_run_on_arm64(stage: str) -> None:
    assert load_stage(stage).architecture == "arm64"


def test_arm64_wheels_are_aarch64_manylinux_up_to_amazon_linux_2023s_glibc() -> None:
    platforms = runtime.RUNTIMES["python3.13"].manylinux_platforms("arm64")
    assert platforms[0] == "manylinux2014_aarch64"
    assert platforms[1:] == [f"manylinux_2_{minor}_aarch64" for minor in range(17, 35)]


def test_a_stage_refuses_an_unknown_or_per_function_architecture(tmp_path: Path) -> None:
    config = json.loads((ROOT / ".chalice" / "config.json").read_text())
    config["stages"]["prod"]["lambda_architecture"] = "aarch64"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"lambda_architecture must be one of x86_64, arm64, "
                                         r"not 'aarch64'"):
        load_stage("prod", path)
    config["stages"]["prod"]["lambda_architecture"] = "arm64"
    config["stages"]["dev"]["lambda_functions"]["job_runner"]["lambda_architecture"] = "x86_64"
    path.write_text(json.dumps(config))
    load_stage("prod", path)
    with pytest.raises(ValueError, match=r"lambda_functions.job_runner.lambda_architecture: "
                                         r"set the architecture for the whole stage"):
        load_stage("dev", path)


def test_the_tests_x86_64_build_of_an_arm64_stage_is_x86_64_throughout(
        package: Callable[[str], Package]) -> None:
    prod = package("prod")
    assert prod.directory.name == "package-prod-x86_64"
    assert set(map(tuple, architectures(prod.template).values())) == {("x86_64",)}
    assert prod.resource("DependenciesLayer")["Properties"]["CompatibleArchitectures"] == [
        "x86_64"]
    assert elf_machines(prod.layer_zip) == {ELF_MACHINES["x86_64"]}


def test_the_arm64_package_is_arm64_throughout_and_within_lambdas_limits(
        arm64_report: arm64.Report) -> None:
    directory = package_dir(load_stage("prod"), ROOT, "arm64")  # what the check packaged
    template = json.loads((directory / "sam.json").read_text())
    functions = architectures(template)
    assert "APIHandler" in functions
    assert set(map(tuple, functions.values())) == {("arm64",)}, functions
    layer = template["Resources"]["DependenciesLayer"]["Properties"]
    assert layer["CompatibleArchitectures"] == ["arm64"]
    assert elf_machines(directory / "layer.zip") == {ELF_MACHINES["arm64"]}
    function = sizes.ZipSize.of(directory / "deployment.zip")
    lines, broken = sizes.report(function, [sizes.ZipSize.of(directory / "layer.zip")])
    assert broken == [], lines


def test_every_package_of_the_arm64_layer_imports_and_computes_on_arm64(
        arm64_report: arm64.Report) -> None:
    assert arm64_report.machine == "aarch64"
    assert arm64_report.python.startswith("3.13.")
    assert {"numpy", "cv2", "orjson", "pybase64", "datasketches", "tokenizers"} <= set(
        arm64_report.imported)
    assert all(Path(origin).is_relative_to(arm64_report.layer)
               for origin in arm64_report.imported.values()), arm64_report.imported
    assert arm64_report.pixel_difference <= arm64.PIXEL_TOLERANCE


def test_the_packaged_function_answers_on_arm64(arm64_report: arm64.Report) -> None:
    assert arm64_report.answers == {"health": 200, "resize": 200}


def test_the_check_refuses_results_that_differ_from_this_machine() -> None:
    expected = {"matmul_sum": 10.0, "resized": [10, 20, 30]}
    assert arm64.compare({"matmul_sum": 10.0, "resized": [11, 20, 29]}, expected) == 1
    with pytest.raises(DeployError, match="differs by 2 levels"):
        arm64.compare({"matmul_sum": 10.0, "resized": [12, 20, 30]}, expected)
    with pytest.raises(DeployError, match=r"matmul_sum: 11.0 != 10.0"):
        arm64.compare({"matmul_sum": 11.0, "resized": [10, 20, 30]}, expected)


def test_missing_tools_are_named_with_how_to_install_them() -> None:
    with pytest.raises(DeployError, match=r"qemu-user, mmdebstrap missing: run make "
                                          r"arm64-tools"):
        arm64.tools(lambda name: None)
    assert arm64.tools(lambda name: f"/opt/bin/{name}") == {
        "qemu-aarch64": "/opt/bin/qemu-aarch64", "mmdebstrap": "/opt/bin/mmdebstrap"}
