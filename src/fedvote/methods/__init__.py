"""One module per federated algorithm, each a :class:`~fedvote.methods.base.Method`."""

from fedvote.methods.base import Method, MethodOutcome
from fedvote.methods.dp_fedavg import DpFedAvg
from fedvote.methods.dp_fedsgd import DpFedSgd
from fedvote.methods.fedavg import FedAvg
from fedvote.methods.pate_fl import PateFL
from fedvote.methods.private_knn_fl import PrivateKnnFL

METHODS: dict[str, type[Method]] = {PateFL.name: PateFL, PrivateKnnFL.name: PrivateKnnFL}
METHODS.update({FedAvg.name: FedAvg, DpFedAvg.name: DpFedAvg, DpFedSgd.name: DpFedSgd})

__all__ = [
    "METHODS",
    "DpFedAvg",
    "DpFedSgd",
    "FedAvg",
    "Method",
    "MethodOutcome",
    "PateFL",
    "PrivateKnnFL",
]
