"""Data: registry of datasets, raw readers, preprocessing, prepared-dataset loading."""
