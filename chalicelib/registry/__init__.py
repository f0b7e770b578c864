"""The model registry: each model's model.json read and checked once, with its labels."""
