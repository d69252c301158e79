"""Datasets, partitioners and the federation (agents' private splits, public pool, test set)."""

from fedvote.data.datasets import Dataset, available_datasets, load_dataset
from fedvote.data.federation import Federation, LabeledData, build_federation
from fedvote.data.partition import PartitionSpec, partition_indices

__all__ = [
    "Dataset",
    "Federation",
    "LabeledData",
    "PartitionSpec",
    "available_datasets",
    "build_federation",
    "load_dataset",
    "partition_indices",
]
