"""The data quality monitor's core: Model Monitor's statistics, constraints and checks.

Pure Python on numpy and Apache DataSketches, run by ``sagegate monitor`` and by the scheduled
function alike; it imports nothing else of sagegate's, reads no files and calls no AWS service
(its callers hand it lines and write the documents it returns).
"""
