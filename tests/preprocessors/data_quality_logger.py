# After Barazii/tf-penguins-classification, code/data_quality_monitoring_preprocessing.py, and
# the "Custom logging for preprocessing script" section of the SageMaker Developer Guide: the
# two-argument form, preprocess_handler(inference_record, logger), logging through the
# analyzer's logger and returning the CSV input's fields as columns 00..NN.
import logging

logger = logging.getLogger()
logger.setLevel("INFO")


def preprocess_handler(inference_record, logger):
    input_data = inference_record.endpoint_input.data
    logger.info(f"This is data input {input_data}")
    return {str(i).zfill(2): d for i, d in enumerate(input_data.split(","))}
