"""A Model Monitor record preprocessor, as written for SageMaker's own monitoring jobs.

``sagegate capture captures/efficientnet-lite0/ --preprocess-handler
docs/examples/preprocess_handler.py`` runs it unchanged over the image model's capture
records: one flat row per record, the top class and its probability, which is what a drift
baseline on the model's confidence needs. It reads only what the analyzer's record has
(``event_dict`` is the raw record: the request id is its ``eventMetadata.inferenceId``).
"""
import json


def preprocess_handler(inference_record):
    """One record in, one row out (``[]`` would drop the record)."""
    probabilities = json.loads(inference_record.endpoint_output.data)
    top = max(range(len(probabilities)), key=probabilities.__getitem__)
    return {
        "inference_id": inference_record.event_dict["eventMetadata"].get("inferenceId"),
        "top_class": top,
        "top_probability": round(probabilities[top], 4),
    }
