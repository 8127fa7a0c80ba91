"""The PySpark data source that reads topics straight from the bucket (batch and streaming)."""
