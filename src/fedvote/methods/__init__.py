"""One module per federated algorithm, each a :class:`~fedvote.methods.base.Method`."""

from fedvote.methods.base import Method, MethodOutcome
from fedvote.methods.dp_fedavg import DpFedAvg
from fedvote.methods.dp_fedsgd import DpFedSgd
from fedvote.methods.fedaux_fdp import FedAuxF, FedAuxFdp, FedAvgP, FedDP
from fedvote.methods.fedavg import FedAvg
from fedvote.methods.pate_fl import PateFL
from fedvote.methods.prifedsync import PriFedSync
from fedvote.methods.private_knn_fl import PrivateKnnFL
from fedvote.methods.weighted_pate import WeightedPate

METHODS: dict[str, type[Method]] = {PateFL.name: PateFL, PrivateKnnFL.name: PrivateKnnFL}
METHODS.update({FedAvg.name: FedAvg, DpFedAvg.name: DpFedAvg, DpFedSgd.name: DpFedSgd})
METHODS.update({m.name: m for m in (FedAuxFdp, FedAuxF, FedDP, FedAvgP)})
METHODS[WeightedPate.name] = WeightedPate
METHODS[PriFedSync.name] = PriFedSync

__all__ = [
    "METHODS",
    "DpFedAvg",
    "DpFedSgd",
    "FedAvg",
    "FedAvgP",
    "FedAuxF",
    "FedAuxFdp",
    "FedDP",
    "Method",
    "MethodOutcome",
    "PateFL",
    "PriFedSync",
    "PrivateKnnFL",
    "WeightedPate",
]
