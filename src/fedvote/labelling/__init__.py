"""Query-time labelling: the teachers answer a querying party's examples, one charged answer each.

The CaPC mode (Choquette-Choo et al. 2021, cited by the reputation-weighted PATE paper)
behind ``fedvote label``: :mod:`~fedvote.labelling.session` holds the protocol (plan, the
ledger, teachers trained once, each answer charged before it is computed),
:mod:`~fedvote.labelling.queries` reads and checks the querying party's file. The command
line (:mod:`fedvote.cli.label`) only parses flags and prints what the protocol reports.
"""

from fedvote.labelling.queries import check_query_range, load_queries
from fedvote.labelling.session import Answer, Labelling, LabelOutcome, answer_queries, plan_labelling

__all__ = [
    "Answer",
    "LabelOutcome",
    "Labelling",
    "answer_queries",
    "check_query_range",
    "load_queries",
    "plan_labelling",
]
