"""Datasets, partitioners and the federation (agents' private splits, public pool, test set)."""

from fedvote.data import multidigit  # noqa: F401 - registers multidigit and multidigit-mnist
from fedvote.data.datasets import (
    DATA_ENV,
    Dataset,
    DatasetSplits,
    DatasetStatus,
    available_datasets,
    dataset_status,
    has_official_test_split,
    is_dataset_name,
    load_dataset,
    load_splits,
    resize_images,
    resolve_data_dir,
)
from fedvote.data.federation import (
    Federation,
    LabeledData,
    build_domain_federation,
    build_federation,
    build_noniid_federation,
    mnist_noniid_federation,
)
from fedvote.data.partition import PartitionSpec, partition_indices

__all__ = [
    "DATA_ENV",
    "Dataset",
    "DatasetSplits",
    "DatasetStatus",
    "Federation",
    "LabeledData",
    "PartitionSpec",
    "available_datasets",
    "build_domain_federation",
    "build_federation",
    "build_noniid_federation",
    "dataset_status",
    "has_official_test_split",
    "is_dataset_name",
    "load_dataset",
    "load_splits",
    "mnist_noniid_federation",
    "partition_indices",
    "resize_images",
    "resolve_data_dir",
]
