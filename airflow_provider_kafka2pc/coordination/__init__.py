"""The coordination core: deciding, finishing and recovering two-phase commits, free of Airflow.

* :mod:`.decision`: the decision rule (``assess``): COMMIT only when every participant
  prepared, the counts match, every transaction is open and the commit margin fits.
* :mod:`.finish`: finishing a batch by its RECORDED verdict (commit, abort, loss repair).
* :mod:`.recovery`: what is open on the broker (discovery), what to do with each in-doubt
  batch and open transaction (rules), and doing it (rounds).

The CLI, the hooks, the operators, the sensor and the trigger all call these; none holds
protocol or ledger logic of its own.
"""

from .decision import Assessment, assess
from .finish import Coordinator, Finished, LostParticipant, Reprepare
from .recovery import RecoveryReport, recover

__all__ = [
    "Assessment",
    "Coordinator",
    "Finished",
    "LostParticipant",
    "RecoveryReport",
    "Reprepare",
    "assess",
    "recover",
]
