"""Privacy auditing: empirical ε lower bounds for fedvote's mechanisms (``fedvote audit``).

Proofs and accountants give an upper bound on ε; an audit measures a *lower* bound by
trying to tell two neighbouring federations apart from what the server receives
(Jagielski, Ullman & Oprea 2020; Nasr et al. 2021; Steinke, Nasr & Jagielski 2023). A
lower bound above the claimed ε is a bug. ``docs/privacy.md``, "Auditing", says what each
audit covers.

* :mod:`~fedvote.audit.bounds` — Clopper–Pearson, counts → ε lower bound;
* :mod:`~fedvote.audit.canaries` — the neighbouring federations' canaries;
* :mod:`~fedvote.audit.distinguishers` — the tests on what the server receives;
* :mod:`~fedvote.audit.vote_release` — the voting methods' release, run many times;
* :mod:`~fedvote.audit.one_run` — many canaries in one run (Steinke et al. 2023);
* :mod:`~fedvote.audit.trainer_canaries` — DP-FedSGD's and PriFedSync's one run through
  their own trainer, on record canaries;
* :mod:`~fedvote.audit.fedavg_canaries` — DP-FedAvg's one run through its own run (sampling,
  local training, noise shares, secure sum or server noise), one record canary a client;
* :mod:`~fedvote.audit.result` — :class:`AuditResult`, what every audit returns;
* :mod:`~fedvote.audit.api` — :func:`audit`, which dispatches to the audits above.

Importing this package loads nothing heavy; :func:`audit` imports the runner when called.
"""

from __future__ import annotations

from fedvote.audit.api import AuditResult, audit, audit_config

__all__ = ["AuditResult", "audit", "audit_config"]
