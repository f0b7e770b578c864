"""Pre- and post-processing for a BERT sentiment classifier served by TensorFlow Serving on
SageMaker (the TF Serving container's inference.py contract).

Request (application/json): {"text": "..."}, or JSON lines of them, one per line.
Answer: TF Serving's {"predictions": [[p], ...]}, one positive-sentiment probability per text.
"""
import json
import os

from tokenizers import BertWordPieceTokenizer

max_seq_length = 64

tokenizer = BertWordPieceTokenizer(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "vocab.txt"), lowercase=True)
tokenizer.enable_truncation(max_length=max_seq_length)  # [CLS] and [SEP] included


def _instance(text):
    input_ids = tokenizer.encode(text).ids  # [CLS] ... [SEP]
    input_mask = [1] * len(input_ids)
    padding = [0] * (max_seq_length - len(input_ids))
    return {"input_ids": input_ids + padding, "input_mask": input_mask + padding}


def _records(body):
    try:
        return [json.loads(body)]
    except json.JSONDecodeError:  # JSON lines: one object per line
        return [json.loads(line) for line in body.splitlines() if line.strip()]


def input_handler(data, context):
    """Texts to TF Serving's predict request."""
    if context.request_content_type not in ("application/json", "application/jsonlines"):
        raise ValueError(f"Unsupported content type {context.request_content_type or 'unknown'}"
                         "; send application/json")
    instances = []
    for record in _records(data.read().decode("utf-8")):
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise ValueError('each record must be a JSON object {"text": "..."}')
        instances.append(_instance(record["text"]))
    if not instances:
        raise ValueError('the body holds no {"text": "..."} record')
    return json.dumps({"signature_name": "serving_default", "instances": instances})


def output_handler(response, context):
    """TF Serving's answer, as it came."""
    if response.status_code != 200:
        raise ValueError(response.content.decode("utf-8"))
    return response.content, context.accept_header
