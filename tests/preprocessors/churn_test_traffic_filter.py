# After aws-samples/amazon-sagemaker-data-quality-monitor-custom-preprocessing,
# src/preprocessor.py (MIT-0): drops test traffic, told apart by a JSON custom attribute
# {"testIndicator": "true"} (event_metadata.custom_attribute[0]); a record without custom
# attributes counts as test traffic. Keeps the class (probability >= 0.5) and the CSV input.
import ast
import json

METADATA_CUSTOM_ATTR_TEST_INDICATOR = "testIndicator"


def str_to_bool(s):
    return s.lower() in ("true", "t", "1", "y")


def eval_test_indicator(attribute):
    if METADATA_CUSTOM_ATTR_TEST_INDICATOR in attribute:
        return str_to_bool(attribute[METADATA_CUSTOM_ATTR_TEST_INDICATOR])
    return False


def get_class_val(probability):
    v = ast.literal_eval(probability)
    return int(v[0] >= 0.5) if isinstance(v, list) else int(v >= 0.5)


def preprocess_handler(inference_record):
    input_enc_type = inference_record.endpoint_input.encoding
    input_data = inference_record.endpoint_input.data.rstrip("\n")
    output_data = get_class_val(inference_record.endpoint_output.data.rstrip("\n"))
    eventmedatadata = inference_record.event_metadata
    custom_attribute = (json.loads(eventmedatadata.custom_attribute[0])
                        if eventmedatadata.custom_attribute is not None else None)
    is_test = eval_test_indicator(custom_attribute) if custom_attribute is not None else True
    if is_test:
        return []
    if input_enc_type == "CSV":
        outputs = str(output_data) + "," + input_data
        return {str(i).zfill(20): d for i, d in enumerate(outputs.split(","))}
    raise ValueError(f"encoding type {input_enc_type} is not supported")
