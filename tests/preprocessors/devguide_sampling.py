# After the "Custom Sampling" example of the SageMaker Developer Guide,
# awsdocs/amazon-sagemaker-developer-guide, doc_source/model-monitor-pre-and-post-processing.md
# (sample code under MIT-0): keeps about one record in ten, dropping the others with [].
import random


def preprocess_handler(inference_record):
    if random.random() > 0.1:
        return []
    input_data = inference_record.endpoint_input.data
    return {i: None if x == -1 else x for i, x in enumerate(input_data.split(","))}
