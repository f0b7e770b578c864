# After aws/amazon-sagemaker-examples, sagemaker_model_monitor/introduction/preprocessor.py
# (Apache-2.0): reads inference_record.event_data, an attribute the analyzer's CapturedData
# (as the Developer Guide prints it) does not have; sagegate names the ones it has.
import random


def preprocess_handler(inference_record):
    event_data = inference_record.event_data
    return {"feature000": random.randint(1, 3), "event": str(event_data)}
