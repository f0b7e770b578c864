"""Users' own pre/post-processing files, run unchanged.

Two contracts people already have files for (CONTRACTS.md section 5):

* ``sagemaker-tfs``: the SageMaker TensorFlow Serving container's ``inference.py``, either
  ``handler(data, context)`` or the pair ``input_handler(data, context)`` /
  ``output_handler(response, context)`` (when ``handler`` exists the pair is ignored, as in the
  container). :class:`TfsHandler` gives them what the container gives: ``data`` a stream,
  ``context`` the container's ``Context`` namedtuple, ``response`` an object shaped like
  ``requests.Response``; their ``(body, content_type)`` is the answer. A ``handler`` posts to
  ``context.rest_uri`` itself (with ``requests``, as in the container): that URL is a loopback
  forwarder in this process which calls the endpoint (:class:`_Forwarder`). ``data`` is a
  stream in every release of the container that runs ``inference.py`` (v1.2.0 of April 2019,
  the first, to v1.8.4, the last tag): its ``python_service.py`` always passed the request's
  stream, though the README's ``input_handler`` docstring (v1.3.1.post1 on) calls ``data``
  "the request data, in format of dict or string" while its code calls ``data.read()``. A file
  that treats ``data`` as ``bytes`` never ran there and is not accepted here either: its
  failure is logged with the advice to read the stream.
* ``cortex``: Cortex's ``handler.py`` for its ONNX runtime (:class:`CortexHandler`), in both
  forms Cortex ran: ``pre_inference(sample, signature, metadata)`` and
  ``post_inference(prediction, signature, metadata)`` (v0.10 and v0.11; ``metadata`` the API's
  own dict, ``signature`` the model's input ``NodeArg`` list for ``pre_inference`` and its
  output list for ``post_inference``), and the earlier ``pre_inference(sample, metadata)`` and
  ``post_inference(prediction, metadata)`` (v0.6, the first with ONNX, to v0.9; ``metadata``
  then the input, resp. output, ``NodeArg`` list). Which form a function has is read from its
  signature when the file is loaded. Each function is optional, as in Cortex: without
  ``pre_inference`` the body goes to the model as it came, without ``post_inference`` the
  model's outputs are the answer. From v0.12 Cortex replaced these functions by predictor
  classes, which are not read here.

Failures: a file that does not import or lacks a function stops start-up with a
:class:`~chalicelib.core.errors.ConfigurationError` naming the file. At request time a
``ValueError``/``TypeError`` from the input side (``input_handler``, ``pre_inference``, a
``handler`` before it called the model) is the client's :class:`InvalidInputError` (400) with its
message, a ``RecursionError`` there a 400 and a ``MemoryError`` a 413; anything else the user's
code raises is a :class:`HandlerError` (500) saying that the log has the traceback under the
answer's ``request_id``, with the exception's type and message only for a model whose
``model.json`` says ``"expose_handler_errors": true``. sagegate's own errors (the endpoint's)
pass through unchanged.

Hostile bodies are bounded before user code runs and after it: a JSON body nesting deeper than
:data:`MAX_JSON_DEPTH` is refused before a handler sees it, and a request the user's code builds
for the endpoint may hold at most :data:`~chalicelib.inference.tensors.MAX_INSTANCES`
instances, as the tensor pipeline's.
"""
