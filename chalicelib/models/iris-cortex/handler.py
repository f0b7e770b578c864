"""Cortex request handler for the iris classifier (ONNX runtime).

The request is one flower's measurements in centimetres:
{"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}
The answer is its class and the probability of each class.
"""
import numpy as np

FEATURES = ["sepal_length", "sepal_width", "petal_length", "petal_width"]


def pre_inference(sample, signature, metadata):
    missing = [name for name in FEATURES if name not in sample]
    if missing:
        raise ValueError(f"missing features: {', '.join(missing)}")
    # one sample, without the batch axis: the runtime adds it
    return {signature[0].name: [float(sample[name]) for name in FEATURES]}


def post_inference(prediction, signature, metadata):
    classes = metadata["classes"]
    probabilities = prediction[0][0]  # the first output's first (only) sample
    return {
        "class": classes[int(np.argmax(probabilities))],
        "probabilities": dict(zip(classes, probabilities, strict=True)),
    }
