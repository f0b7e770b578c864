"""Run the packaged handler the way a Lambda Python runtime does, in a bare interpreter.

Started by :mod:`sagegate.deploy.sandbox` as ``python -I -S -B sandbox_child.py TASK LAYER
RUNTIME IN OUT [HANDLER]``. ``sys.path`` becomes what Lambda gives a function: the code
(``/var/task``), the layer (``/opt/python``), the runtime's packages (``/var/runtime``: boto3,
snapshot_restore_py), the standard library. Nothing of the development virtualenv is importable,
so a dependency missing from the zips fails here as on Lambda.

With ``AWS_LAMBDA_INITIALIZATION_TYPE=snap-start`` it does what SnapStart does between init and
the first invocation: the before-snapshot hooks (reverse order), then the after-restore hooks (in
order, timed).

IN is a JSON list of events for HANDLER (``app`` by default, or an event function such as
``job_runner``); OUT receives the answers, each phase's time, and where each key module was
imported from. Only the standard library is used before the path is set.
"""
import json
import os
import sys
import time

STARTED = time.perf_counter()


class LambdaContext:

    def __init__(self, request_id: str, timeout_seconds: float = 28.0) -> None:
        name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "sagegate")
        self.function_name = name
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{name}"
        self.memory_limit_in_mb = int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1769"))
        self.aws_request_id = request_id
        self.log_group_name = f"/aws/lambda/{name}"
        self.log_stream_name = "2026/11/23/[$LATEST]0123456789abcdef"
        self._deadline = time.monotonic() + timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        return int((self._deadline - time.monotonic()) * 1000)


def _snapshot_and_restore() -> dict:
    import snapshot_restore_py as hooks

    before = list(hooks.get_before_snapshot())
    after = list(hooks.get_after_restore())
    for func, args, kwargs in reversed(before):
        func(*args, **kwargs)
    started = time.perf_counter()
    for func, args, kwargs in after:
        func(*args, **kwargs)
    return {"before_snapshot_hooks": len(before), "after_restore_hooks": len(after),
            "restore_ms": (time.perf_counter() - started) * 1000.0}


def _built_at_import(app: object) -> bool:
    """Whether importing ``app`` built the models' pipelines (older zips kept one predictor,
    ``services._predictor`` or ``app._PREDICTOR``), read without building them."""
    services = getattr(app, "services", None)
    if services is not None:
        return bool(getattr(services, "_pipelines", None)) \
            or getattr(services, "_predictor", None) is not None
    return getattr(app, "_PREDICTOR", None) is not None


def main() -> None:
    task, layer, runtime, events_path, out_path = sys.argv[1:6]
    handler_name = sys.argv[6] if len(sys.argv) > 6 else "app"
    function_timeout = float(sys.argv[7]) if len(sys.argv) > 7 else 28.0
    sys.path[:0] = [task, layer, runtime]
    started = time.perf_counter()
    import app  # the handler module: Lambda calls "app.app"

    import_ms = (time.perf_counter() - started) * 1000.0
    snapstart = None
    if os.environ.get("AWS_LAMBDA_INITIALIZATION_TYPE") == "snap-start":
        snapstart = _snapshot_and_restore()
    with open(events_path, encoding="utf-8") as handle:
        events = json.load(handle)
    handler = getattr(app, handler_name)
    answers, request_ms = [], []
    for index, event in enumerate(events):
        began = time.perf_counter()
        answers.append(handler(event, LambdaContext(f"lambda-request-{index}", function_timeout)))
        request_ms.append((time.perf_counter() - began) * 1000.0)
    origins = {name: getattr(sys.modules.get(name), "__file__", None)
               for name in ("app", "chalice", "chalicelib", "numpy", "cv2", "boto3", "botocore",
                            "snapshot_restore_py", "tokenizers")}
    importable = {}
    for name in ("onnxruntime", "skimage", "pytest", "PIL", "huggingface_hub"):
        try:
            __import__(name)
            importable[name] = True
        except ImportError:
            importable[name] = False
    result = {"answers": answers, "modules": origins, "dev_packages": importable,
              "sys_path": sys.path, "site_loaded": "site" in sys.modules,
              "python": "{}.{}".format(*sys.version_info[:2]),
              "import_ms": import_ms, "request_ms": request_ms,
              "interpreter_ms": (started - STARTED) * 1000.0,
              "built_at_import": _built_at_import(app),
              "snapstart": snapstart}
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main()
