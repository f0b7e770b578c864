# After the JSON preprocessors public Model Monitor examples use for tabular models behind a
# JSON endpoint (json.loads of endpoint_input.data and endpoint_output.data, features as
# feature0000000000..., the model's answer as prediction0...), for a TF Serving-style tensor
# model: {"instances": [[...]]} in, {"predictions": [[...]]} out. Reads only attributes of the
# analyzer's CapturedData: event_metadata.event_id / event_time and the raw event_dict.
import json


def preprocess_handler(inference_record):
    instances = json.loads(inference_record.endpoint_input.data)["instances"]
    answer = json.loads(inference_record.endpoint_output.data)["predictions"]
    row = {f"feature{str(i).zfill(10)}": value for i, value in enumerate(instances[0])}
    row.update({f"prediction{i}": p for i, p in enumerate(answer[0])})
    row["event_id"] = inference_record.event_metadata.event_id
    row["event_time"] = inference_record.event_metadata.event_time
    row["request_id"] = inference_record.event_dict["eventMetadata"].get("inferenceId")
    return row
