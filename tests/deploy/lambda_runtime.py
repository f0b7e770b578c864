"""Run the packaged handler the way Lambda's python3.11 runtime does, in a bare interpreter.

Started by ``test_artifact.py`` as ``python -I -S -B lambda_runtime.py TASK LAYER RUNTIME IN OUT``:
no site-packages, no PYTHON* variables, no user site, no .pyc writes. ``sys.path`` becomes
what Lambda gives a function: the function code (``/var/task``), the layer (``/opt/python``),
then the runtime's own boto3 (``/var/runtime``), then the standard library. Nothing from the
development virtualenv is importable, so a dependency missing from the zips fails here as it
would on Lambda.

IN is a JSON list of API Gateway events; OUT receives the handler's answers and where each
key module was imported from. Only the standard library is used before the path is set.
"""
import json
import os
import sys
import time


class LambdaContext:
    """The attributes Lambda's context object has that code commonly reads."""

    def __init__(self, request_id: str) -> None:
        name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "sagegate")
        self.function_name = name
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{name}"
        self.memory_limit_in_mb = int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1769"))
        self.aws_request_id = request_id
        self.log_group_name = f"/aws/lambda/{name}"
        self.log_stream_name = "2026/11/23/[$LATEST]0123456789abcdef"
        self._deadline = time.monotonic() + 28.0

    def get_remaining_time_in_millis(self) -> int:
        return int((self._deadline - time.monotonic()) * 1000)


def main() -> None:
    task, layer, runtime, events_path, out_path = sys.argv[1:6]
    sys.path[:0] = [task, layer, runtime]
    started = time.perf_counter()
    import app  # the handler module: Lambda calls "app.app"

    import_ms = (time.perf_counter() - started) * 1000.0
    with open(events_path, encoding="utf-8") as handle:
        events = json.load(handle)
    answers = []
    for index, event in enumerate(events):
        answers.append(app.app(event, LambdaContext(f"lambda-request-{index}")))
    origins = {name: getattr(sys.modules.get(name), "__file__", None)
               for name in ("app", "chalice", "chalicelib", "numpy", "cv2", "boto3", "botocore")}
    importable = {}
    for name in ("onnxruntime", "skimage", "pytest", "PIL"):
        try:
            __import__(name)
            importable[name] = True
        except ImportError:
            importable[name] = False
    result = {"answers": answers, "modules": origins, "dev_packages": importable,
              "sys_path": sys.path, "site_loaded": "site" in sys.modules,
              "import_ms": import_ms}
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main()
