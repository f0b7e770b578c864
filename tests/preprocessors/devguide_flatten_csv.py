# After the first "Preprocessing Script" example of the SageMaker Developer Guide,
# awsdocs/amazon-sagemaker-developer-guide, doc_source/model-monitor-pre-and-post-processing.md
# (sample code under MIT-0): one argument; the endpoint's CSV answer, then the CSV input, as
# columns 0000...0 to 0000...N.


def preprocess_handler(inference_record):
    input_data = inference_record.endpoint_input.data
    output_data = inference_record.endpoint_output.data.rstrip("\n")
    data = output_data + "," + input_data
    return {str(i).zfill(20): d for i, d in enumerate(data.split(","))}


def postprocess_handler():
    print("postprocess_handler ran")
