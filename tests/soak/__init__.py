"""The seeded chaos soak (issue 15): a real scheduler backfills while a nemesis injects faults.

``make soak`` (``python -m tests.soak``) runs the long one; ``test_soak.py`` a short one in
CI (marker ``soak``) and the unit tests of the schedule and the checker.
"""
